package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServedRosterJudgesFromBoot: the roster the resolver serves (roster.json,
// saved by the embedded resolver) judges pushes from the agent's start, not
// from its first pass, which waits for podman. Before, a restarted agent
// whose podman was not up took a declaration reusing the served roster's
// generation with other names, whose extra names were then never served
// (found by internal/testkit/sim, seed 59).
func TestServedRosterJudgesFromBoot(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	// The declaration in force has roster 5; the resolver serves roster 6,
	// which came alone (a NATS roster commit) before the restart.
	writeAtomic(t, filepath.Join(state, "declaration.json"),
		`{"schema": 1, "machine": "m", "generation": 1, "mesh_names": "off", "roster": `+fltRoster(5)+`, "containers": []}`)
	writeAtomic(t, filepath.Join(state, "roster.json"), fltRoster(6))
	sock := filepath.Join(dir, "push.sock")
	logs, _, stop := fltInProcess(t, "--runtime", "podman", "--podman", "unix://"+filepath.Join(dir, "no-podman.sock"),
		"--machine", "m", "--state", state, "--http", "off", "--push", "unix:"+sock)
	defer stop()
	other := `{"generation": 6, "zones": ["internal"], "names": {"alpha.internal": ["10.1.1.1"], "other.internal": ["10.3.0.1"]}}`
	err := fltPusherWithin(sock, 30*time.Second)(`{"schema": 1, "machine": "m", "generation": 2, "mesh_names": "off", "roster": ` + other + `, "containers": []}`)
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "roster generation 6") {
		t.Fatalf("push of roster generation 6 with other names than served = %v; want 409 naming roster generation 6\n%s", err, logs.String())
	}
	// The same roster as served is taken.
	if err := fltPusherWithin(sock, 10*time.Second)(`{"schema": 1, "machine": "m", "generation": 2, "mesh_names": "off", "roster": ` + fltRoster(6) + `, "containers": []}`); err != nil {
		t.Fatalf("push of the served roster: %v\n%s", err, logs.String())
	}
}
