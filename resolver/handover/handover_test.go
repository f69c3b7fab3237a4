package handover

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

type fakeSource struct {
	mu                        sync.Mutex
	prepared, aborted, served int
	files                     func() []File
}

func (s *fakeSource) Prepare(context.Context) ([]File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prepared++
	return s.files(), nil
}
func (s *fakeSource) Abort() { s.mu.Lock(); s.aborted++; s.mu.Unlock() }
func (s *fakeSource) Release(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served++
	return nil
}

func (s *fakeSource) counts() (int, int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prepared, s.aborted, s.served
}

// pipeFiles returns n files whose far ends the test keeps, so it can tell
// the descriptors that arrive are the very ones sent.
func pipeFiles(t *testing.T, n int) ([]File, []*os.File) {
	var send []File
	var keep []*os.File
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		send = append(send, File{Name: "pipe", File: w})
		keep = append(keep, r)
		t.Cleanup(func() { r.Close() })
	}
	return send, keep
}

func TestHandover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "handover.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 450 // more than one message's worth
	var keep []*os.File
	src := &fakeSource{files: func() []File {
		var send []File
		send, keep = pipeFiles(t, n)
		return send
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, src, "v1", slog.New(slog.DiscardHandler)) }()

	// A successor that hangs up before serving: the source resumes.
	s, files, err := Take(ctx, path, "v2")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != n || s.Version != "v1" {
		t.Fatalf("Take: %d files from version %q, want %d from v1", len(files), s.Version, n)
	}
	for _, f := range files {
		f.File.Close()
	}
	s.Abort()
	waitFor(t, func() bool { _, a, _ := src.counts(); return a == 1 }, "Abort after the successor hung up")

	// A successor that serves: the source releases, Serve returns.
	s, files, err = Take(ctx, path, "v2")
	if err != nil {
		t.Fatal(err)
	}
	src.mu.Lock() // Prepare wrote keep, holding it
	kept := keep
	src.mu.Unlock()
	for i, f := range files {
		// The descriptor is the write end of the test's pipe i.
		if _, err := f.File.Write([]byte{byte(i)}); err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		var b [1]byte
		if _, err := kept[i].Read(b[:]); err != nil || b[0] != byte(i) {
			t.Fatalf("file %d is not the pipe sent (%v, %d)", i, err, b[0])
		}
		f.File.Close()
	}
	if err := s.Serving(ctx); err != nil {
		t.Fatalf("Serving: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v, want nil after a handover", err)
	}
	if p, a, r := src.counts(); p != 2 || a != 1 || r != 1 {
		t.Errorf("prepared %d, aborted %d, released %d; want 2, 1, 1", p, a, r)
	}
}

func TestTakeWithoutPredecessor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "handover.sock")
	if _, _, err := Take(context.Background(), path, "v"); !errors.Is(err, ErrNoPredecessor) {
		t.Errorf("Take with no socket = %v, want ErrNoPredecessor", err)
	}
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // a stale socket file, nobody accepting
	if _, _, err := Take(context.Background(), path, "v"); !errors.Is(err, ErrNoPredecessor) {
		t.Errorf("Take with a stale socket = %v, want ErrNoPredecessor", err)
	}
	l, err = Listen(path) // replaces the stale file
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer l.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
