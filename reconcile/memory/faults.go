package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// ErrInjected is the error an injected Fault returns when it names none.
var ErrInjected = errors.New("memory: injected failure")

// ErrBeingRemoved is what every call but List and Remove returns for a
// container in reconcile.StateRemoving, as podman refuses them ("container
// state improper").
var ErrBeingRemoved = errors.New("memory: the container's removal began and was cut short; it can only be removed")

// Call is one call of a Runtime method, as failure hooks see it.
type Call struct {
	Method string // "List", "Inspect", "Create", "Start", "Stop", "Rename", "Remove", "Update"
	ID     string // the container's ID; empty for List and Create
	Name   string // Create's and Rename's name
	N      int    // this call's number among all calls of Method, from 1
}

func (c Call) withID(id string) Call     { c.ID = id; return c }
func (c Call) withName(name string) Call { c.Name = name; return c }

// Fault fails one future call of a method.
type Fault struct {
	Method string
	// N picks the call: 1 is the next call of Method, 2 the one after.
	N int
	// Err is returned by the call; nil means ErrInjected.
	Err error
	// After lets the call take effect before it fails, as when the runtime
	// did the work but its reply was lost.
	After bool
	// Crash makes this and every later call of any method fail with Err,
	// as if the process driving the runtime died here, until Recover.
	Crash bool
	// Cut cuts the call short half-way and fails it, as when podman's API
	// service dies in the middle of it. Only a Remove can be cut: it leaves
	// the container in reconcile.StateRemoving, where podman leaves it
	// (see Runtime.Remove). With Crash, as the service stays dead, every
	// later call fails too, until Recover.
	Cut bool
}

type fault struct {
	Fault
	at int // absolute call number of Method that fires it
}

// Inject arms f.
func (m *Runtime) Inject(f Fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.N < 1 {
		f.N = 1
	}
	if f.Err == nil {
		f.Err = ErrInjected
	}
	if f.Cut && f.Method != "Remove" {
		panic(fmt.Sprintf("memory: a %s cannot be cut short (only a Remove can)", f.Method))
	}
	m.faults = append(m.faults, &fault{Fault: f, at: m.calls[f.Method] + f.N})
}

// Before sets a hook run before every call, with the runtime locked: it must
// not call the Runtime. A non-nil error fails the call before it takes
// effect. Nil removes the hook.
func (m *Runtime) Before(hook func(Call) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.before = hook
}

// Watch sets a hook run after every call, whatever its outcome (failed,
// injected fault included), with the call and every container as the call
// left them, by name; the runtime is locked: the hook must not call the
// Runtime. Tests check invariants with it after each step of a pass. Nil
// removes the hook.
func (m *Runtime) Watch(hook func(call Call, now []Container)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watch = hook
}

// watched runs the Watch hook for call. mu must be held.
func (m *Runtime) watched(call Call) {
	if m.watch == nil {
		return
	}
	now := make([]Container, 0, len(m.containers))
	for _, c := range m.containers {
		now = append(now, m.snapshot(c))
	}
	slices.SortFunc(now, func(a, b Container) int { return cmp.Compare(a.Name, b.Name) })
	m.watch(call, now)
}

// Recover ends a crash and disarms every pending fault, as a restarted
// process would find the runtime.
func (m *Runtime) Recover() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.crashed = nil
	m.faults = nil
	m.pending = nil
}

// Calls returns how many times method was called (failed calls included).
func (m *Runtime) Calls(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[method]
}

// CallCounts returns the number of calls of every method called so far.
func (m *Runtime) CallCounts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.calls))
	for k, v := range m.calls {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// ResetCalls sets every call counter to zero. Armed faults keep their
// place relative to the calls still to come.
func (m *Runtime) ResetCalls() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.faults {
		f.at -= m.calls[f.Method]
	}
	clear(m.calls)
}

// enter counts call and returns the error it must fail with before taking
// effect, if any. mu must be held.
func (m *Runtime) enter(ctx context.Context, call Call) error {
	m.calls[call.Method]++
	call.N = m.calls[call.Method]
	m.pending = nil
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.crashed != nil {
		return fmt.Errorf("%s: %w", call.Method, m.crashed)
	}
	if m.before != nil {
		if err := m.before(call); err != nil {
			return err
		}
	}
	for i, f := range m.faults {
		if f.Method != call.Method || f.at != call.N {
			continue
		}
		m.faults = append(m.faults[:i], m.faults[i+1:]...)
		err := fmt.Errorf("%s call %d: %w", call.Method, call.N, f.Err)
		if f.After || f.Cut {
			m.pending = &pendingFault{err: err, crash: f.Crash, cut: f.Cut}
			return nil
		}
		if f.Crash {
			m.crashed = f.Err
		}
		return err
	}
	return nil
}

// leave returns the error of an After fault armed for the call that just
// took effect. mu must be held.
func (m *Runtime) leave(Call) error {
	p := m.pending
	m.pending = nil
	if p == nil {
		return nil
	}
	if p.crash {
		m.crashed = errors.Unwrap(p.err)
	}
	return p.err
}

type pendingFault struct {
	err   error
	crash bool
	cut   bool // the call stops half-way (see Fault.Cut)
}
