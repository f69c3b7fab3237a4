package journal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// oldPassEntry and oldAction are PassEntry and Action as the previous
// release has them: what its `meshhost history` decodes.
type oldPassEntry struct {
	Version    int           `json:"version"`
	Seq        uint64        `json:"seq"`
	Time       time.Time     `json:"time"`
	Generation uint64        `json:"generation,omitempty"`
	Duration   time.Duration `json:"duration_ns"`
	Deferred   int           `json:"deferred,omitempty"`
	Actions    []oldAction   `json:"actions"`
}

type oldAction struct {
	Kind      string        `json:"kind"`
	Container string        `json:"container"`
	Reason    string        `json:"reason,omitempty"`
	ID        string        `json:"id,omitempty"`
	NewID     string        `json:"new_id,omitempty"`
	Deferred  bool          `json:"deferred,omitempty"`
	Err       string        `json:"error,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
}

// TestPassEntriesReadBothWays: an entry with the fields this release added
// (holds, released, an action's frozen, a pass number the agent gives) is
// read by the previous release's decoding, its fields kept; an entry the
// previous release wrote prints, its actions counted as done and deferred.
func TestPassEntriesReadBothWays(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// As the previous release wrote it: no holds, no frozen, Seq assigned.
	if _, err := j.RecordPass(PassEntry{Time: time.Unix(100, 0), Generation: 3, Deferred: 1, Actions: []Action{
		{Kind: "replace", Container: "a"}, {Kind: "replace", Container: "b", Deferred: true}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.RecordPass(PassEntry{Seq: 7, Time: time.Unix(200, 0), Generation: 4,
		Holds:    []Hold{{Kind: HoldDeclaration, Generation: 4, Replacements: 5}},
		Released: []Hold{{Kind: HoldFrozen}},
		Actions:  []Action{{Kind: "create", Container: "c", Frozen: true}}}); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, passesDir, "*.log"))
	if len(segs) != 1 {
		t.Fatalf("segments %v, want one", segs)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	var old []oldPassEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		fields := strings.SplitN(line, " ", 3)
		var e oldPassEntry
		if err := json.Unmarshal([]byte(fields[2]), &e); err != nil {
			t.Fatalf("the previous release cannot decode %s: %v", fields[2], err)
		}
		old = append(old, e)
	}
	if len(old) != 2 || old[0].Seq != 1 || old[1].Seq != 7 || old[1].Generation != 4 || len(old[1].Actions) != 1 || old[1].Actions[0].Container != "c" {
		t.Errorf("the previous release reads %+v", old)
	}

	passes, err := j.Passes()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := passes[0].String("T"), "T pass 1: did 1 replace in 0s; deferred by the budget: 1 replace"; got != want {
		t.Errorf("an entry of the previous release prints\n%q, want\n%q", got, want)
	}
	if got, want := passes[1].String("T"), "T pass 7: declaration 4 held (5 replacements, 0 removals) (meshhost approve 4 releases it); nothing applied in 0s; frozen: 1 create; unfrozen"; got != want {
		t.Errorf("got\n%q, want\n%q", got, want)
	}
	if j.LastPass() != 7 {
		t.Errorf("LastPass = %d, want 7", j.LastPass())
	}
}
