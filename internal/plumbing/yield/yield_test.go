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
	"testing/synctest"
	"time"
)

// TestPendingLookedAtEvery50us checks that Maybe consults Pending once per
// checkEvery calls at most, and at most every 50µs of the computation's
// clock: the bubble's clock moves 10µs between two looks' worth of calls.
func TestPendingLookedAtEvery50us(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		y := Yielder{Pending: func() bool { calls.Add(1); return false }}
		const steps = 100
		for range steps {
			for range checkEvery {
				y.Maybe()
			}
			time.Sleep(10 * time.Microsecond)
		}
		// 1000µs of steps, a look allowed every 50µs: the first look and
		// one every fifth step after it.
		if got, want := calls.Load(), int64(steps/5); got != want {
			t.Errorf("Pending consulted %d times in %d steps of 10µs, want %d (every %v)", got, steps, want, every)
		}
	})
}

// TestNoPendingNeverParks checks that the zero Yielder (no Pending) is
// usable and never parks, whatever the clock says.
func TestNoPendingNeverParks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var y Yielder
		for range 100 {
			time.Sleep(every)
			y.Now()
		}
		if y.parked != 0 {
			t.Errorf("zero Yielder parked %d times, want 0", y.parked)
		}
	})
}

// TestMaybeParksOnlyWhenWaiting checks that Maybe sleeps when Pending says
// work waits, and only then, for nap each time.
func TestMaybeParksOnlyWhenWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var waiting atomic.Bool
		y := Yielder{Pending: waiting.Load}
		look := func() {
			for range 20 {
				time.Sleep(every) // 50µs since the last look
				y.Now()
			}
		}
		look()
		if y.parked != 0 {
			t.Errorf("parked %d times with nothing waiting, want 0", y.parked)
		}
		waiting.Store(true)
		start := time.Now()
		look()
		if y.parked != 20 {
			t.Errorf("parked %d times in 20 looks with work waiting, want 20", y.parked)
		}
		if d, want := time.Since(start), 20*(every+nap); d != want {
			t.Errorf("20 looks with a nap each took %v, want %v", d, want)
		}
	})
}

// TestReadFile reads files smaller and larger than a read, empty, and one
// that does not exist, with and without work waiting.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, pending := range []func() bool{nil, func() bool { return true }} {
		for _, size := range []int{0, 1, readChunk - 1, readChunk, 3*readChunk + 17} {
			t.Run(fmt.Sprintf("size=%d,pending=%t", size, pending != nil), func(t *testing.T) {
				want := make([]byte, size)
				for i := range want {
					want[i] = byte(i * 7)
				}
				path := filepath.Join(dir, fmt.Sprint(size))
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				got, err := ReadFile(path, pending)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("ReadFile of %d bytes = %d bytes, %v; want the file", size, len(got), err)
				}
			})
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile of a missing file = %v, want fs.ErrNotExist", err)
	}
}
