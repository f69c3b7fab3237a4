// Package atomicfile writes files that a crash leaves whole: either the old
// content or the new, never a part. Every state file meshhost keeps (the
// saved roster and declaration, the migration state, the journal) goes
// through it.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data: a temporary file in the same directory,
// written and fsynced, renamed over path, and the directory fsynced so the
// rename itself survives a crash.
//
// On error no temporary file is left behind, and path is unchanged unless
// only the final fsync of the directory failed (then path holds data, but a
// crash may still bring the old content back). The error is an
// *fs.PathError naming path itself and the step that failed, e.g. "write
// /var/lib/meshhost/roster.json: no space left on device", and wraps the
// cause (errors.Is(err, syscall.ENOSPC) holds on a full disk).
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return pathError("create temporary file for", path, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if renamed {
			return
		}
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("removing the temporary file %s: %w", tmp, rerr))
		}
	}()
	op := "write"
	_, err = f.Write(data)
	if err == nil {
		op, err = "sync", f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		op, err = "close", cerr
	}
	if err != nil {
		return pathError(op, path, err)
	}
	if err := os.Chmod(tmp, perm); err != nil {
		return pathError("chmod", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return pathError("rename temporary file onto", path, err)
	}
	renamed = true
	d, err := os.Open(dir)
	if err != nil {
		return pathError("open directory of", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return pathError("sync directory of", path, err)
	}
	return nil
}

// pathError is err, a failure on the temporary file, as a failure on path:
// the temporary's name tells an operator nothing (and it is removed).
func pathError(op, path string, err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}
