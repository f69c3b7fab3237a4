//go:build unix

package migrations

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
)

// TestGateSeesAWriteOfTheSameSizeAndTime: another process (an operator
// command) rewrites the state file with content of the same size, and the
// same modification time (two writes within the file system's time
// granularity); the gate still reads the new content, since the write
// renamed another file over it.
func TestGateSeesAWriteOfTheSameSizeAndTime(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t0}
	g := openGate(t, dir, clk, prometheus.NewRegistry())
	if _, err := g.Observe([]Network{defaultNet}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, stateFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	other := bytes.Replace(data, []byte("10.88.0.0/16"), []byte("10.77.0.0/16"), 1)
	if bytes.Equal(other, data) || len(other) != len(data) {
		t.Fatalf("the state file does not name the subnet:\n%s", data)
	}
	if err := atomicfile.Write(path, other, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := g.State().Networks["podman"].Subnets; !slices.Equal(got, []string{"10.77.0.0/16 via 10.88.0.1"}) {
		t.Errorf("after a write of the same size and time the gate reads subnets %v, want 10.77.0.0/16 via 10.88.0.1", got)
	}
}

// TestUpdateThatChangesNothingTakesNoLock: the agent observes the same
// networks at every pass; with the state file as the gate last wrote
// it, that takes neither the file's lock nor a read of it, so an operator
// command holding the lock does not stall the pass. A change still waits
// for the lock, and is applied to what the file holds once it has it.
func TestUpdateThatChangesNothingTakesNoLock(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t0}
	g := openGate(t, dir, clk, prometheus.NewRegistry())
	if _, err := g.Observe([]Network{defaultNet}); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, stateFile+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	observe := func(nets ...Network) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := g.Observe(nets)
			done <- err
		}()
		return done
	}
	select {
	case err := <-observe(defaultNet):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("observing the same networks waited for the state file's lock")
	}
	changed := observe(defaultNet, meshNet)
	select {
	case err := <-changed:
		t.Fatalf("a new network was recorded (%v) while another process held the lock", err)
	case <-time.After(200 * time.Millisecond):
	}
	syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	st, err := LoadState(filepath.Join(dir, stateFile))
	if err != nil || st.Networks["mesh"] == nil || !st.Networks["mesh"].Present {
		t.Errorf("the state file after the change: %+v, %v; want network mesh present", st, err)
	}
}
