package yield

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatch checks that Maybe consults the watched sources, at most every
// 50µs, and not after they are removed.
func TestWatch(t *testing.T) {
	var calls atomic.Int64
	unwatch := Watch(func() bool { calls.Add(1); return false })
	var y Yielder
	start := time.Now()
	// 20 ms, and at least 64 looks at the clock: a preemption taking up
	// the 20 ms must not leave too few calls for a look.
	for i := 0; time.Since(start) < 20*time.Millisecond || i < 64*checkEvery; i++ {
		y.Maybe()
	}
	elapsed := time.Since(start)
	n := calls.Load()
	if n == 0 {
		t.Fatalf("a watched source was never consulted in %v (at least %d Maybe calls)", elapsed, 64*checkEvery)
	}
	if limit := int64(elapsed/every) + 1; n > limit {
		t.Errorf("source consulted %d times in %v, want at most %d (every %v)", n, elapsed, limit, every)
	}
	unwatch()
	calls.Store(0)
	for range 100 * checkEvery {
		y.Now()
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("source consulted %d times after it was removed", n)
	}
}

// TestMaybeParksOnlyWhenWaiting checks that Maybe sleeps when a source has
// work waiting, and only then: with two sources watched, either counts.
func TestMaybeParksOnlyWhenWaiting(t *testing.T) {
	var waiting atomic.Bool
	defer Watch(func() bool { return false })()
	defer Watch(waiting.Load)()
	look := func(y *Yielder) {
		for range 20 {
			y.last = time.Time{} // as if 50µs had passed
			y.Now()
		}
	}
	var y Yielder
	look(&y)
	if y.parked != 0 {
		t.Errorf("parked %d times with nothing waiting, want 0", y.parked)
	}
	waiting.Store(true)
	start := time.Now()
	look(&y)
	if y.parked != 20 {
		t.Errorf("parked %d times in 20 looks with work waiting, want 20", y.parked)
	}
	if d := time.Since(start); d < 20*nap {
		t.Errorf("20 naps took %v, less than 20 x %v", d, nap)
	}
}

// TestReadFile reads files smaller and larger than a read, empty, and one
// that does not exist.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, readChunk - 1, readChunk, 3*readChunk + 17} {
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i * 7)
		}
		path := filepath.Join(dir, fmt.Sprint(size))
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadFile of %d bytes = %d bytes, %v; want the file", size, len(got), err)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file = %v, want fs.ErrNotExist", err)
	}
}
