// Package fullfs gives tests a real full file system: a small tmpfs mounted
// for the test alone, and a filler file that takes every free block of it,
// so that writes fail with ENOSPC ("no space left on device") exactly as on
// a full disk.
//
// Mounting needs root (CAP_SYS_ADMIN). Without it the tests skip, except
// under CI=true, where they fail (the pattern of internal/testkit/podmantest).
package fullfs

import (
	"errors"
	"fmt"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FillerName is the name of the file Fill writes; tests that list a
// directory leave it out.
const FillerName = ".fullfs-filler"

// Mount mounts a fresh tmpfs of size bytes (rounded up to pages) for t,
// with the mount options opts (e.g. "nr_inodes=16"), and returns its
// directory. Cleanup unmounts it. It skips t when mounting is not permitted,
// or fails it under CI=true.
func Mount(t testing.TB, size int64, opts ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("size=%d,mode=0755", size)
	for _, o := range opts {
		data += "," + o
	}
	if err := mount(dir, data); err != nil {
		msg := fmt.Sprintf("cannot mount a tmpfs at %s (%v), so the full-disk tests cannot run; run them as root (CAP_SYS_ADMIN)", dir, err)
		needs.Missing(t, "%s", msg)
	}
	t.Cleanup(func() {
		if err := unmount(dir); err != nil {
			t.Errorf("fullfs: unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a filler file in dir until the file system has no free
// block left, then gives back leave bytes (rounded up to whole pages), and
// returns a function that removes the filler. The filler is removed at
// cleanup in any case.
func Fill(t testing.TB, dir string, leave int64) (release func()) {
	t.Helper()
	path := filepath.Join(dir, FillerName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("fullfs: %v", err)
	}
	chunk := make([]byte, 64<<10)
	for len(chunk) > 0 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				f.Close()
				t.Fatalf("fullfs: filling %s: %v", dir, err)
			}
			chunk = chunk[:len(chunk)/2] // fill the last partial pages too
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fullfs: %v", err)
	}
	if leave > 0 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		page := int64(os.Getpagesize())
		size := max(0, fi.Size()/page*page-(leave+page-1)/page*page)
		if err := os.Truncate(path, size); err != nil {
			t.Fatalf("fullfs: %v", err)
		}
	}
	var done bool
	release = func() {
		if done {
			return
		}
		done = true
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("fullfs: removing the filler: %v", err)
		}
	}
	t.Cleanup(release)
	return release
}

// Free returns the bytes free in dir's file system.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	n, err := free(dir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Names lists the names in dir, the filler left out.
func Names(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		if de.Name() != FillerName {
			out = append(out, de.Name())
		}
	}
	return out
}

// TempFiles returns the files under dir (recursively) whose names say they
// are atomicfile's temporaries (".NAME.tmp-*"): a failed write must leave
// none.
func TempFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ok, _ := filepath.Match(".*.tmp-*", d.Name()); ok {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Snapshot returns the content of every regular file under dirs, by path,
// the filler left out: what a test compares before and after writes fail.
func Snapshot(t testing.TB, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() || d.Name() == FillerName {
				return err
			}
			data, err := os.ReadFile(path)
			out[path] = string(data)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
