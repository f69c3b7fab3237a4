//go:build unix

package migrations

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile takes an exclusive lock on the lock file at path, so that the
// agent and an operator's `meshhost migrate pause` never interleave their
// read-modify-write of the state. It returns the unlock.
func lockFile(path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("locking migration state: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking migration state: %w", err)
	}
	f.Chmod(0o600) // one made 0644 by an older meshhost

	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking migration state: %w", err)
	}
	return func() { f.Close() }, nil
}

// inodeOf is fi's inode number.
func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
