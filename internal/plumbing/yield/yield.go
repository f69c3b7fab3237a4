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
// in whole milliseconds), so a Yielder parks only when its Pending says work
// is waiting. The owner of that work passes it in: the resolver's says
// whether a query waits in one of its UDP sockets' receive queues
// (resolver.Server.Busy). Without one, a Yielder never parks. There is no
// registry: a computation steps aside only for the work it was told about.
package yield

import (
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

// Yielder tracks when its computation last looked. The zero value, and a
// nil *Yielder, never park; it is not safe for concurrent use: each
// computation makes its own.
type Yielder struct {
	// Pending reports whether work is waiting that the computation should
	// step aside for, e.g. a datagram in a socket's receive queue. It must
	// be cheap (it is called every 50µs during a computation) and safe for
	// concurrent use. Nil: nothing is ever waiting.
	Pending func() bool

	last   time.Time
	calls  uint32
	parked int // times it slept, for tests
}

// Maybe parks the goroutine briefly when Pending says work is waiting and
// it has been 50µs since the last look. Call it once per step of a
// loop; between looks at the clock it costs an increment.
func (y *Yielder) Maybe() {
	if y == nil || y.Pending == nil {
		return
	}
	y.calls++
	if y.calls%checkEvery != 0 {
		return
	}
	now := time.Now()
	if now.Sub(y.last) < every {
		return
	}
	y.last = now
	if y.Pending() {
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
