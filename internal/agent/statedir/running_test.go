//go:build linux

package statedir

import (
	"os"
	"testing"
)

// TestAgentRunning: an agent holding the directory's lock is seen running,
// with its pid, by a look that takes no lock; none before it locks and
// after it unlocks.
func TestAgentRunning(t *testing.T) {
	d := New(t.TempDir())
	if _, running, err := d.AgentRunning(); err != nil || running {
		t.Fatalf("before any agent: running %v, err %v; want not running", running, err)
	}
	l, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if pid, running, err := d.AgentRunning(); err != nil || !running || pid != os.Getpid() {
		t.Errorf("while locked: pid %d, running %v, err %v; want pid %d", pid, running, err, os.Getpid())
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, running, err := d.AgentRunning(); err != nil || running {
		t.Errorf("after unlock: running %v, err %v; want not running", running, err)
	}
}
