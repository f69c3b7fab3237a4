package podmantest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Exclusive holds a machine-wide lock until the test ends, for tests that
// bind the host's shared resolver addresses (a bridge gateway's port 53, the
// node-local address). `go test ./...` runs packages in parallel processes;
// without the lock two such tests would fight over the same address.
func Exclusive(t testing.TB) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "meshhost-podmantest-host.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("podmantest: opening %s: %v", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("podmantest: locking %s: %v", path, err)
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
