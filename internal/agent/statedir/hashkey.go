package statedir

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshhost/meshhost/digest"
)

// HashKey is the machine's secret for the keyed hashes (HMAC-SHA256) that
// container records, plan, explain and logs carry instead of env and label
// values (digest.Key). It is mode 0600, made on first use (LoadHashKey), and
// never leaves the machine.
func (d Dir) HashKey() string { return d.join("hash.key") }

// LoadHashKey returns the machine's hash key, making it (digest.KeySize bytes
// from crypto/rand, mode 0600) if it does not exist yet. It is the same
// across restarts with the same state directory, so that the hashes shown
// stay comparable, and another on every machine.
//
// The key is written whole before it appears under its name (a temporary
// file, linked into place): a crash leaves no partial key, and two
// processes making it at once (the agent and a `meshhost plan`) both end
// with the one that was linked first.
func (d Dir) LoadHashKey() (*digest.Key, error) {
	path := d.HashKey()
	for range 3 {
		secret, err := os.ReadFile(path)
		if err == nil {
			key, err := digest.NewKey(secret)
			if err != nil {
				return nil, fmt.Errorf("hash key %s: %w: if it is damaged, remove it and a new key is made (hashes shown before then no longer compare)", path, err)
			}
			return key, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading the hash key: %w", err)
		}
		if err := d.makeHashKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("hash key %s: made, and then missing: is something removing it?", path)
}

// makeHashKey writes a new key to path unless a file is there already
// (then an error that is fs.ErrExist).
func (d Dir) makeHashKey(path string) error {
	secret := make([]byte, digest.KeySize)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("making the hash key: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".hash.key.tmp-*")
	if err != nil {
		return fmt.Errorf("making the hash key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	// CreateTemp makes it 0600 already; say so for whoever reads this.
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(secret)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("making the hash key %s: %w", path, err)
	}
	// link, unlike rename, never replaces a key another process made.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("making the hash key %s: %w", path, err)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("making the hash key %s: %w", path, err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("making the hash key %s: %w", path, err)
	}
	return nil
}
