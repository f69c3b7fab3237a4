package podman

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// errInjected is what an injected failure returns.
var errInjected = errors.New("injected failure")

// fault fails the N-th call of Method (1: the next one) after it is armed.
type fault struct {
	Method string
	N      int
	// After lets the call take effect on podman before it fails, as when
	// the reply is lost.
	After bool
	// Crash makes every later call of any method fail too, as if the process
	// driving podman died there, until recover.
	Crash bool
}

// call is one runtime call as the test runtime saw it.
type call struct {
	Method, ID, Name string
	Start, End       time.Time
}

// testRuntime wraps a Runtime for reconciler tests: it scopes List to the
// test's containers, so that a test's reconciler never sees (nor removes)
// what another test, running at once on the same podman, made; it injects
// faults; and it logs every call with its times.
type testRuntime struct {
	rt     *Runtime
	prefix string

	// mu guards the fields below.
	mu      sync.Mutex
	armed   *fault
	seen    int // calls of armed.Method since it was armed
	crashed bool
	calls   []call
}

var _ reconcile.Runtime = (*testRuntime)(nil)

func scoped(rt *Runtime, prefix string) *testRuntime { return &testRuntime{rt: rt, prefix: prefix} }

// inject arms f.
func (r *testRuntime) inject(f fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.seen = &f, 0
}

// recover ends a crash and disarms any fault.
func (r *testRuntime) recover() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed, r.crashed = nil, false
}

// log returns the calls so far.
func (r *testRuntime) log() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// do runs one call of method through the fault injection.
func (r *testRuntime) do(method, id, name string, f func() error) error {
	r.mu.Lock()
	if r.crashed {
		r.mu.Unlock()
		return fmt.Errorf("%s: process crashed: %w", method, errInjected)
	}
	fire := false
	if a := r.armed; a != nil && a.Method == method {
		r.seen++
		if r.seen == a.N {
			fire = true
		}
	}
	a := r.armed
	if fire {
		r.armed = nil
		r.crashed = a.Crash
	}
	r.mu.Unlock()
	if fire && !a.After {
		return fmt.Errorf("%s: %w", method, errInjected)
	}
	c := call{Method: method, ID: id, Name: name, Start: time.Now()}
	err := f()
	c.End = time.Now()
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	if fire {
		return fmt.Errorf("%s (took effect): %w", method, errInjected)
	}
	return err
}

func (r *testRuntime) List(ctx context.Context) ([]reconcile.Observed, error) {
	var out []reconcile.Observed
	err := r.do("List", "", "", func() error {
		all, err := r.rt.List(ctx)
		for _, o := range all {
			if strings.HasPrefix(o.Name, r.prefix) {
				out = append(out, o)
			}
		}
		return err
	})
	return out, err
}

func (r *testRuntime) Inspect(ctx context.Context, id string) (reconcile.Inspected, error) {
	var in reconcile.Inspected
	err := r.do("Inspect", id, "", func() (err error) { in, err = r.rt.Inspect(ctx, id); return err })
	return in, err
}

func (r *testRuntime) Create(ctx context.Context, s spec.Rendered) (string, error) {
	var id string
	err := r.do("Create", "", s.Name, func() (err error) { id, err = r.rt.Create(ctx, s); return err })
	return id, err
}

func (r *testRuntime) Start(ctx context.Context, id string) error {
	return r.do("Start", id, "", func() error { return r.rt.Start(ctx, id) })
}

func (r *testRuntime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	return r.do("Stop", id, "", func() error { return r.rt.Stop(ctx, id, timeout) })
}

func (r *testRuntime) Rename(ctx context.Context, id, name string) error {
	return r.do("Rename", id, name, func() error { return r.rt.Rename(ctx, id, name) })
}

func (r *testRuntime) Remove(ctx context.Context, id string) error {
	return r.do("Remove", id, "", func() error { return r.rt.Remove(ctx, id) })
}

func (r *testRuntime) Update(ctx context.Context, id string, res spec.Resources) error {
	return r.do("Update", id, "", func() error { return r.rt.Update(ctx, id, res) })
}

// newReconciler returns a Reconciler over rt, owning the containers of rt's
// scope only, with a budget that never defers and a quick health poll.
func newReconciler(t testing.TB, rt *testRuntime, mod func(*reconcile.Config)) *reconcile.Reconciler {
	t.Helper()
	cfg := reconcile.Config{
		Runtime: rt, Owner: rt.prefix,
		Budget:     reconcile.Budget{Max: 1000, Window: time.Minute},
		HealthPoll: 100 * time.Millisecond, HealthTimeout: 30 * time.Second,
		HashKey: testKey, // one machine's: a new Reconciler is a restart
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := reconcile.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mustReconcile runs one pass and fails the test on an error.
func mustReconcile(t testing.TB, r *reconcile.Reconciler, desired []spec.Rendered) *reconcile.Result {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := r.Reconcile(c, desired)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

// byName returns the test's containers by name.
func byName(t testing.TB, rt reconcile.Runtime) map[string]reconcile.Observed {
	t.Helper()
	list, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]reconcile.Observed{}
	for _, o := range list {
		m[o.Name] = o
	}
	return m
}
