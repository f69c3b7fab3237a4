package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatchSeesWritesAndRenames(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "roster.json")
	os.WriteFile(path, []byte("1"), 0o600)
	w, err := New(path)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, 10*time.Millisecond, func() { changed <- struct{}{} }); close(done) }()
	defer func() { cancel(); <-done }()

	expect := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatalf("no change seen after %s", what)
		}
	}
	// drain takes the changes still coming, until 200 ms pass without one:
	// on a loaded machine one write's events can come more than a debounce
	// apart, and a late change must not pass for the next one.
	drain := func() {
		for {
			select {
			case <-changed:
			case <-time.After(200 * time.Millisecond):
				return
			}
		}
	}
	os.WriteFile(path, []byte("2"), 0o600)
	expect("a write")
	tmp := filepath.Join(dir, ".tmp")
	os.WriteFile(tmp, []byte("3"), 0o600)
	// The temporary file is not the watched one: only the rename counts.
	drain()
	os.Rename(tmp, path)
	expect("a rename over the file")
	drain()
	os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o600)
	select {
	case <-changed:
		t.Error("a change to another file woke the watcher of a file")
	case <-time.After(100 * time.Millisecond):
	}
}
