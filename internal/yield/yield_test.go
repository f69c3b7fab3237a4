package yield

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestWatch checks that Maybe consults the watched sources, at most every
// 100µs, and not after they are removed.
func TestWatch(t *testing.T) {
	var calls atomic.Int64
	unwatch := Watch(func() bool { calls.Add(1); return false })
	var y Yielder
	start := time.Now()
	for time.Since(start) < 20*time.Millisecond {
		y.Maybe()
	}
	elapsed := time.Since(start)
	n := calls.Load()
	if n == 0 {
		t.Fatal("a watched source was never consulted in 20 ms of Maybe calls")
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
			y.last = time.Time{} // as if 100µs had passed
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
