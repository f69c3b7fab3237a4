//go:build unix

package migrations

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir's lock file, so that the agent and
// an operator's `meshhost migrate pause` never interleave their
// read-modify-write of the state. It returns the unlock.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("locking migration state: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, StateFile+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking migration state: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking migration state: %w", err)
	}
	return func() { f.Close() }, nil
}
