// Package atomicfile writes files that a crash leaves whole: either the old
// content or the new, never a part. Every state file meshhost keeps (the
// saved roster and declaration, the migration state, the journal) goes
// through it.
package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
)

// Write replaces path with data: a temporary file in the same directory,
// written and fsynced, renamed over path, and the directory fsynced so the
// rename itself survives a crash. On error path is unchanged and no
// temporary file is left behind.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return err
	}
	if err := os.Chmod(tmp, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
