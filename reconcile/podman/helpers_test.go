package podman

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/spec"
)

// newRuntime connects a Runtime to the test podman service (skipping the
// test without one) and returns it with the test's harness.
func newRuntime(t testing.TB, opts ...Option) (*Runtime, *podmantest.Harness) {
	t.Helper()
	h := podmantest.New(t)
	rt, err := New(t.Context(), h.Socket(), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rt, h
}

// ctx is a context for one test step: no step waits for ever.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// render renders c for the test: its name and dependencies under the
// test's prefix, the test's label added.
func render(t testing.TB, h *podmantest.Harness, c spec.Container, r *spec.Roster, m spec.Mode) spec.Rendered {
	t.Helper()
	c.Name = h.Name(c.Name)
	deps := c.DependsOn
	c.DependsOn = nil
	for _, d := range deps {
		c.DependsOn = append(c.DependsOn, h.Name(d))
	}
	c.Labels = maps.Clone(c.Labels)
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	maps.Copy(c.Labels, h.Labels())
	if c.Image == "" {
		c.Image = podmantest.Image
	}
	out, err := spec.Render(c, r, m)
	if err != nil {
		t.Fatalf("Render(%s) = %v", c.Name, err)
	}
	return out
}

// testKey is the machine hash key of the tests' Reconcilers.
var testKey = digest.NewRandomKey()

// withDigest returns r with meshhost's digest labels added, as the reconciler
// creates it.
func withDigest(r spec.Rendered) spec.Rendered {
	out := r
	out.Labels = maps.Clone(r.Labels)
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[digest.LabelDigest] = testKey.Of(r)
	out.Labels[digest.LabelRecord] = testKey.Record(r)
	return out
}

// createStarted creates and starts r, failing the test on an error.
func createStarted(t testing.TB, rt *Runtime, r spec.Rendered) string {
	t.Helper()
	id, err := rt.Create(ctx(t), r)
	if err != nil {
		t.Fatalf("Create(%s) = %v", r.Name, err)
	}
	if err := rt.Start(ctx(t), id); err != nil {
		t.Fatalf("Start(%s) = %v", r.Name, err)
	}
	return id
}

// freePort returns a TCP port free on loopback right now.
func freePort(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	n, _ := strconv.Atoi(p)
	return uint16(n)
}

// sleeper is the plain test container: busybox sleeping for five minutes,
// and exiting at once on SIGTERM or SIGINT (sleep as PID 1 would ignore them
// and make every stop wait for its timeout).
func sleeper(name string) spec.Container {
	return spec.Container{Name: name, Image: podmantest.Image, Command: []string{"sh", "-c", "trap 'exit 0' TERM INT; sleep 300 & wait"}}
}

// cmpOpts compares spec values: netip types by value.
var cmpOpts = cmp.Options{cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})}
