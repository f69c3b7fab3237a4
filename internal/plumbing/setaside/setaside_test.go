package setaside_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/meshhost/meshhost/internal/plumbing/setaside"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// damage flips the checksum of the second of three records of the log at
// path.
func damage(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) < 3 {
		t.Fatalf("%s holds %d lines, want 3 or more", path, len(lines))
	}
	f := strings.Fields(lines[1])
	f[1] = "00000000"
	lines[1] = strings.Join(f, " ") + "\n"
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptLogsMetric: a damaged record before the last one, in the
// declaration log (a deltalog.Store's) or in a journal segment, shows as
// meshhost_state_corrupt_logs{log} 1 for that log, over the agent's state
// directory, once the damage is found; a sound state directory shows
// nothing.
func TestCorruptLogsMetric(t *testing.T) {
	dir := statedir.New(t.TempDir())
	c := setaside.New(dir.Path(), dir.Logs(), dir.SetAside)
	sound := `# HELP meshhost_state_corrupt_logs Copies of saved-state logs set aside for a record damaged before their last one (PATH.corrupt-TIME), by log: a state directory needing a look. Inspect the copy, then remove it.
# TYPE meshhost_state_corrupt_logs gauge
meshhost_state_corrupt_logs{log="declaration.log"} 0
meshhost_state_corrupt_logs{log="journal/declarations"} 0
meshhost_state_corrupt_logs{log="journal/passes"} 0
meshhost_state_corrupt_logs{log="journal/rosters"} 0
meshhost_state_corrupt_logs{log="roster.json.log"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(sound)); err != nil {
		t.Fatalf("a sound state directory: %v", err)
	}

	l, _, err := deltalog.Open(dir.DeclarationLog())
	if err != nil {
		t.Fatal(err)
	}
	for k := uint64(1); k <= 3; k++ {
		if err := l.Append(k, []byte(fmt.Sprintf(`{"to":%d}`, k))); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	damage(t, dir.DeclarationLog())
	if _, _, err := deltalog.Open(dir.DeclarationLog()); err != nil { // the agent's start
		t.Fatal(err)
	}

	j, err := journal.Open(dir.Journal(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 3; g++ {
		if _, err := j.RecordPass(journal.PassEntry{Generation: g}); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir.Journal(), "passes", "*.log"))
	if len(segs) != 1 {
		t.Fatalf("journal segments %v, want one", segs)
	}
	damage(t, segs[0])
	if _, err := journal.Open(dir.Journal(), journal.Options{}); err != nil { // the agent's start
		t.Fatal(err)
	}

	want := `# HELP meshhost_state_corrupt_logs Copies of saved-state logs set aside for a record damaged before their last one (PATH.corrupt-TIME), by log: a state directory needing a look. Inspect the copy, then remove it.
# TYPE meshhost_state_corrupt_logs gauge
meshhost_state_corrupt_logs{log="declaration.log"} 1
meshhost_state_corrupt_logs{log="journal/declarations"} 0
meshhost_state_corrupt_logs{log="journal/passes"} 1
meshhost_state_corrupt_logs{log="journal/rosters"} 0
meshhost_state_corrupt_logs{log="roster.json.log"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
