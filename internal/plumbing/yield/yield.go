// Package yield lets a long computation step aside for goroutines that serve
// the network, when they have something waiting.
//
// With GOMAXPROCS=1 a goroutine that computes for 100 ms (parsing a roster
// of 100,000 names, compiling it) delays every query until the scheduler
// preempts it, 10 ms later, again and again. runtime.Gosched does not help:
// the yielding goroutine goes back on the run queue and is picked again
// before the network poller is asked what is ready. A short sleep parks it,
// so the scheduler polls the network and runs the readers first.
//
// A sleep costs up to a millisecond when nothing is ready (the poller waits
// in whole milliseconds), so a Yielder parks only when a watched source says
// work is waiting (the resolver watches its UDP sockets' receive queues).
// With nothing watched, it never parks.
package yield

import (
	"sync"
	"sync/atomic"
	"time"
)

// every is how often a computation looks whether work is waiting.
const every = 50 * time.Microsecond

// nap is how long it parks when work is waiting: long enough to still be
// pending when the scheduler next looks at its timers (else it would be
// resumed before the network is polled), short enough that it is over by
// the time the readers are done.
const nap = 10 * time.Microsecond

// checkEvery is how many Maybe calls pass between two looks at the clock.
const checkEvery = 32

// Yielder tracks when its computation last looked. The zero value is ready
// to use; it is not safe for concurrent use.
type Yielder struct {
	last   time.Time
	calls  uint32
	parked int // times it slept, for tests
}

// Maybe parks the goroutine briefly when a watched source has work waiting
// and it has been 50µs since the last look. Call it once per step of a
// loop; between looks at the clock it costs an increment.
func (y *Yielder) Maybe() {
	y.calls++
	if y.calls%checkEvery != 0 {
		return
	}
	now := time.Now()
	if now.Sub(y.last) < every {
		return
	}
	y.last = now
	if waiting() {
		time.Sleep(nap)
		y.parked++
	}
}

// Now is Maybe looking at the clock whatever the count: for the point
// between two long steps.
func (y *Yielder) Now() {
	y.calls = checkEvery - 1
	y.Maybe()
}

// watched holds the sources, copied on write: Maybe reads it without a lock.
var (
	watchMu sync.Mutex
	watched atomic.Pointer[[]*source]
)

type source struct{ pending func() bool }

// Watch adds a source: pending reports whether work is waiting that long
// computations should step aside for, e.g. a datagram in a socket's receive
// queue. It must be cheap (it is called every 50µs during a computation)
// and safe for concurrent use. The returned func removes the source.
func Watch(pending func() bool) (unwatch func()) {
	src := &source{pending}
	watchMu.Lock()
	defer watchMu.Unlock()
	var list []*source
	if cur := watched.Load(); cur != nil {
		list = append(list, *cur...)
	}
	list = append(list, src)
	watched.Store(&list)
	return func() {
		watchMu.Lock()
		defer watchMu.Unlock()
		cur := watched.Load()
		if cur == nil {
			return
		}
		var list []*source
		for _, s := range *cur {
			if s != src {
				list = append(list, s)
			}
		}
		watched.Store(&list)
	}
}

// waiting reports whether any watched source has work waiting.
func waiting() bool {
	cur := watched.Load()
	if cur == nil {
		return false
	}
	for _, s := range *cur {
		if s.pending() {
			return true
		}
	}
	return false
}
