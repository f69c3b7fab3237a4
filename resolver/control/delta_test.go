package control

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// bigRoster is generation gen of n names, svcI.internal at 10.x.y.z.
func bigRoster(gen uint64, n int) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: make(map[string][]netip.Addr, n)}
	for i := range n {
		r.Names[fmt.Sprintf("svc%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(64 + i>>16), byte(i >> 8), byte(i)})}
	}
	return r
}

// TestRosterDelta: PATCH /v1/roster puts a delta in force and saves it;
// the same delta again is no fault and changes nothing (admit.Same, as the
// agent's push answers it); a delta to the generation served with other
// names is refused as not newer; a delta from another
// generation than the one served is refused with spec.ErrDeltaBase, an
// invalid one with its fault, and neither changes what is served.
func TestRosterDelta(t *testing.T) {
	dir := t.TempDir()
	srv := newResolver(t, dir)
	_, c := serve(t, dir, srv, Config{})

	// Before any roster: a delta from 0 is the first roster; one from
	// another generation does not apply.
	if err := c.Apply(&spec.RosterDelta{From: 3, To: 4, Set: map[string][]netip.Addr{"a.internal": addrs("10.0.0.1")}}); !errors.Is(err, spec.ErrDeltaBase) {
		t.Errorf("Apply(3 -> 4) before any roster = %v, want spec.ErrDeltaBase", err)
	}
	first := &spec.RosterDelta{From: 0, To: 1, Zones: []string{"internal"}, Set: map[string][]netip.Addr{
		"a.internal": addrs("10.0.0.1"), "b.internal": addrs("10.0.0.2"), "c.internal": addrs("10.0.0.3"),
	}}
	if err := c.Apply(first); err != nil {
		t.Fatalf("Apply(0 -> 1) = %v", err)
	}
	one := &spec.RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{
		"B.Internal": addrs("10.0.1.2", "10.0.1.1"), "d.internal": addrs("10.0.0.4"),
	}, Remove: []string{"c.internal"}}
	if err := c.Apply(one); err != nil {
		t.Fatalf("Apply(1 -> 2) = %v", err)
	}
	want := &spec.Roster{Generation: 2, Zones: []string{"internal"}, Names: map[string][]netip.Addr{
		"a.internal": addrs("10.0.0.1"), "b.internal": addrs("10.0.1.1", "10.0.1.2"), "d.internal": addrs("10.0.0.4"),
	}}
	check := func(what string) {
		t.Helper()
		got, err := c.RosterContext(t.Context())
		if err != nil {
			t.Fatalf("%s: RosterContext = %v", what, err)
		}
		if diff := cmp.Diff(want, got.Normalize(), cmpNetip); diff != "" {
			t.Errorf("%s: roster served -want +got:\n%s", what, diff)
		}
	}
	check("after two deltas")

	for _, tc := range []struct {
		name string
		d    *spec.RosterDelta
		is   error
		not  error
		want string
	}{
		{"the generation served, other names", &spec.RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"x.internal": addrs("10.9.0.1")}}, resolver.ErrStaleGeneration, spec.ErrDeltaBase, "serving 2"},
		// From another base, as the agent's push judges it (not newer before).
		{"an older generation", &spec.RosterDelta{From: 0, To: 1, Set: map[string][]netip.Addr{"x.internal": addrs("10.9.0.1")}}, spec.ErrDeltaBase, resolver.ErrStaleGeneration, "from generation 0, the resolver serves 2"},
		{"from a stale generation", &spec.RosterDelta{From: 1, To: 3, Set: map[string][]netip.Addr{"x.internal": addrs("10.9.0.1")}}, spec.ErrDeltaBase, resolver.ErrStaleGeneration, "from generation 1, the resolver serves 2"},
		{"from a generation not served yet", &spec.RosterDelta{From: 5, To: 6, Remove: []string{"a.internal"}}, spec.ErrDeltaBase, resolver.ErrStaleGeneration, "serves 2"},
		{"invalid", &spec.RosterDelta{From: 2, To: 3, Set: map[string][]netip.Addr{"bad_name.internal": addrs("10.9.0.1")}}, nil, spec.ErrDeltaBase, "HTTP 422"},
		{"set and removed", &spec.RosterDelta{From: 2, To: 3, Set: map[string][]netip.Addr{"a.internal": addrs("10.9.0.1")}, Remove: []string{"A.internal"}}, nil, spec.ErrDeltaBase, "either set or removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Apply(tc.d)
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) || errors.Is(err, tc.not) {
				t.Errorf("Apply(%d -> %d) = %v, want an error wrapping %v, not %v, saying %q", tc.d.From, tc.d.To, err, tc.is, tc.not, tc.want)
			}
			check("after " + tc.name)
		})
	}

	if err := c.Apply(one); err != nil {
		t.Errorf("Apply(the same delta again) = %v, want nil (nothing changes)", err)
	}
	check("after the same delta again")

	// Saved: a restarted resolver serves generation 2, and takes the next
	// delta on top of it.
	srv.Close()
	srv2 := newResolver(t, dir)
	dir2 := t.TempDir() // a socket of its own: the first server's is still being shut down
	_, c2 := serve(t, dir2, srv2, Config{ExposurePath: filepath.Join(dir2, "exposure.json")})
	check2 := func() {
		t.Helper()
		got := c2.Roster()
		if got == nil {
			t.Fatal("the restarted resolver serves no roster")
		}
		if diff := cmp.Diff(want, got.Normalize(), cmpNetip); diff != "" {
			t.Errorf("the restarted resolver serves -want +got:\n%s", diff)
		}
	}
	check2()
	if err := c2.Apply(&spec.RosterDelta{From: 2, To: 3, Remove: []string{"a.internal"}}); err != nil {
		t.Fatalf("Apply(2 -> 3) after a restart = %v", err)
	}
	want.Generation = 3
	delete(want.Names, "a.internal")
	check2()
}

// TestRosterDeltaToAnOlderResolver: a resolver that knows no PATCH (one
// older than deltas, answering 405) is sent the whole roster it serves,
// changed by the delta; a delta from another generation is still refused
// with spec.ErrDeltaBase, without a PUT.
func TestRosterDeltaToAnOlderResolver(t *testing.T) {
	dir := t.TempDir()
	srv := newResolver(t, dir)
	cs, err := NewServer(Config{Resolver: srv})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var methods []string
	inner := cs.Handler()
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
		if r.Method == http.MethodPatch {
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		inner.ServeHTTP(w, r)
	})
	sock := filepath.Join(dir, "control.sock")
	l, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: old, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	defer hs.Close()
	c := NewClient(ClientConfig{Path: sock, Timeout: 5 * time.Second})

	if err := c.Update(roster(1, "10.89.0.7")); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(&spec.RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"new.internal": addrs("10.89.0.8")}}); err != nil {
		t.Fatalf("Apply(1 -> 2) to a resolver without PATCH = %v", err)
	}
	want := roster(2, "10.89.0.7")
	want.Names["new.internal"] = addrs("10.89.0.8")
	if diff := cmp.Diff(want.Normalize(), srv.Roster().Normalize(), cmpNetip); diff != "" {
		t.Errorf("served -want +got:\n%s", diff)
	}
	if err := c.Apply(&spec.RosterDelta{From: 1, To: 3, Remove: []string{"new.internal"}}); !errors.Is(err, spec.ErrDeltaBase) {
		t.Errorf("Apply(1 -> 3) while 2 is served = %v, want spec.ErrDeltaBase", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if w := []string{"PUT", "PATCH", "GET", "PUT", "PATCH", "GET"}; !cmp.Equal(w, methods) {
		t.Errorf("requests %v, want %v", methods, w)
	}
}
