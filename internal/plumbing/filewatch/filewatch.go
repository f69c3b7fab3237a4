// Package filewatch tells when a file or a directory's contents change,
// including when a file is replaced by a rename, which is how controllers
// and editors write files atomically.
package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watcher watches one path: a file, or a directory and the files in it.
type Watcher struct {
	w     *fsnotify.Watcher
	path  string // absolute, clean
	isDir bool
}

// New starts watching path. A file is watched through its directory, since
// a rename replaces the file's inode; every change in that directory wakes
// the watcher, so such a file is best kept in a directory of its own.
func New(path string) (*Watcher, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	isDir := err == nil && fi.IsDir()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	dir := abs
	if !isDir {
		dir = filepath.Dir(abs)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	return &Watcher{w: w, path: abs, isDir: isDir}, nil
}

// Run calls onChange once changes have settled for debounce, after every
// burst of changes to the path, until ctx ends; then it releases the watch.
// Permission changes alone are not changes.
func (w *Watcher) Run(ctx context.Context, debounce time.Duration, onChange func()) {
	defer w.w.Close()
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if w.isDir || filepath.Clean(ev.Name) == w.path {
				settle = time.After(debounce)
			}
		case _, ok := <-w.w.Errors:
			if !ok {
				return
			}
		case <-settle:
			settle = nil
			onChange()
		}
	}
}
