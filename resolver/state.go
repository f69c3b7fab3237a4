package resolver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshhost/meshhost/spec"
)

// The state file is the roster file format (spec.ParseRoster), so an
// operator can read it, and feed it to `meshhost resolver --roster`.

var errNoState = errors.New("no saved roster")

func loadState(path string) (*spec.Roster, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoState
	}
	if err != nil {
		return nil, fmt.Errorf("reading saved roster: %w", err)
	}
	r, err := spec.ParseRoster(data)
	if err != nil {
		return nil, fmt.Errorf("saved roster %q is unreadable (remove it to start without one): %w", path, err)
	}
	return r, nil
}

// saveState writes r to path atomically: a temporary file in the same
// directory, synced, renamed over path, and the directory synced.
func saveState(path string, r *spec.Roster) error {
	data, err := r.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encoding roster: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("saving roster to %q: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("saving roster to %q: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("saving roster to %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("saving roster to %q: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("saving roster to %q: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
