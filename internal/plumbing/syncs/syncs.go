// Package syncs holds what package sync lacks: an assertion, for functions
// whose names end in Locked, that the lock they need is held.
package syncs

import "sync"

// AssertLocked panics unless m is locked. It cannot tell who holds it; it
// catches a ...Locked function called without the lock, which would race
// silently otherwise (tailscale's syncs.AssertLocked).
func AssertLocked(m *sync.Mutex) {
	if m.TryLock() {
		m.Unlock()
		panic("syncs: mutex is not locked")
	}
}
