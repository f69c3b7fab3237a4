package reconcile_test

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

var resolveMode = spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}}}

func roster(gen uint64, names ...string) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for i, n := range names {
		r.Names[n] = []netip.Addr{netip.AddrFrom4([4]byte{100, 64, 0, byte(i + 1)})}
	}
	return r
}

func render(t testing.TB, c spec.Container, r *spec.Roster, m spec.Mode) spec.Rendered {
	t.Helper()
	out, err := spec.Render(c, r, m)
	if err != nil {
		t.Fatalf("Render(%q): %v", c.Name, err)
	}
	return out
}

func renderAll(t testing.TB, cs []spec.Container, r *spec.Roster, m spec.Mode) []spec.Rendered {
	t.Helper()
	out := make([]spec.Rendered, len(cs))
	for i, c := range cs {
		out[i] = render(t, c, r, m)
	}
	return out
}

func container(name, image string) spec.Container {
	return spec.Container{Name: name, Image: image}
}

// fakeClock is a settable clock for budgets.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testKey is the machine hash key of the tests' Reconcilers
// (newReconciler), as the agent's state directory keeps one.
var testKey = digest.NewRandomKey()

func newReconciler(t testing.TB, rt reconcile.Runtime, mod func(*reconcile.Config)) *reconcile.Reconciler {
	t.Helper()
	cfg := reconcile.Config{Runtime: rt, Budget: reconcile.Budget{Max: 1000, Window: time.Minute}, HealthPoll: time.Millisecond, HealthTimeout: 5 * time.Second, HashKey: testKey}
	if mod != nil {
		mod(&cfg)
	}
	r, err := reconcile.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func mustReconcile(t testing.TB, r *reconcile.Reconciler, desired []spec.Rendered) *reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), desired)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

// ids returns the ID of every container by name, leaving out aside ones.
func ids(rt *memory.Runtime) map[string]string {
	out := map[string]string{}
	for _, c := range rt.Containers() {
		out[c.Name] = c.ID
	}
	return out
}

// kinds returns the plan's non-keep actions as "kind name".
func kinds(p *reconcile.Plan) []string {
	var out []string
	for _, a := range p.Changes() {
		out = append(out, string(a.Kind)+" "+a.Name)
	}
	return out
}

func reasonOf(p *reconcile.Plan, name string) string {
	for _, a := range p.Actions {
		if a.Name == name {
			return a.Reason
		}
	}
	return ""
}

// checkConverged fails unless every desired container runs under its name
// with its desired settings and nothing is left aside.
func checkConverged(t *testing.T, rt *memory.Runtime, desired []spec.Rendered) {
	t.Helper()
	for _, d := range desired {
		c, ok := rt.Container(d.Name)
		if !ok {
			t.Errorf("container %q missing", d.Name)
			continue
		}
		if c.State != reconcile.StateRunning {
			t.Errorf("container %q is %s, want running", d.Name, c.State)
		}
		if c.Settings.Image != d.Image {
			t.Errorf("container %q runs image %q, want %q", d.Name, c.Settings.Image, d.Image)
		}
	}
	for _, c := range rt.Containers() {
		if strings.HasSuffix(c.Name, reconcile.AsideSuffix) {
			t.Errorf("container %q left aside", c.Name)
		}
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
