package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// TestSecondAgentOnAStateDirectoryRefuses: while an agent runs on a state
// directory, a second `meshhost agent` on the same --state exits 1 at
// once, with an error naming the directory and the pid holding it, and
// writes nothing there: two agents never write the same state (issue 22,
// requirement 4).
func TestSecondAgentOnAStateDirectoryRefuses(t *testing.T) {
	dir := t.TempDir()
	decl := filepath.Join(dir, "decl.json")
	writeAtomic(t, decl, `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "zones": ["internal"], "names": {}}, "containers": []}`)
	state := filepath.Join(dir, "state")
	args := []string{"--runtime", "memory", "--machine", "ace", "--state", state, "--declaration", decl,
		"--http", "off", "--push", "off", "--probe-binary", "/nonexistent"}
	startAgent(t, "first agent", args...)
	eventually(t, "the first agent saved its declaration", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(state, "declaration.json"))
		return err == nil
	})
	before, _ := os.ReadFile(filepath.Join(state, "declaration.json"))

	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env := &environment{stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	start := time.Now()
	code := run(ctx, env, append([]string{"agent"}, args...))
	if code != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("a second agent on the same state directory: exit %d after %v, want 1 at once:\n%s", code, time.Since(start), out.String())
	}
	for _, want := range []string{state, "pid " + strconv.Itoa(os.Getpid()), "in use by another meshhost agent"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the second agent's error does not name %q:\n%s", want, out.String())
		}
	}
	if after, _ := os.ReadFile(filepath.Join(state, "declaration.json")); string(after) != string(before) {
		t.Error("the second agent rewrote the declaration")
	}
}
