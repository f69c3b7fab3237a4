package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
)

// Both resolvers are what the agent feeds.
var (
	_ Resolver = (*control.Client)(nil)
	_ Resolver = (*resolver.Server)(nil)
)

// controlService serves a resolver's control protocol on a unix socket,
// as meshhost-resolver does, and records the requests' methods and paths.
type controlService struct {
	mu       sync.Mutex
	requests []string
}

func (cs *controlService) serve(t testing.TB, sock string, srv *resolver.Server) (stop func()) {
	t.Helper()
	s, err := control.NewServer(control.Config{Resolver: srv})
	if err != nil {
		t.Fatal(err)
	}
	l, err := control.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.mu.Lock()
		cs.requests = append(cs.requests, r.Method+" "+r.URL.Path)
		cs.mu.Unlock()
		h.ServeHTTP(w, r)
	})}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(l) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			hs.Close()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// count returns how many requests were method path.
func (cs *controlService) count(method, path string) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for _, r := range cs.requests {
		if r == method+" "+path {
			n++
		}
	}
	return n
}

// reset forgets the requests made.
func (cs *controlService) reset() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.requests = nil
}

// TestDeltasReachTheResolverService: an agent whose resolver is a service
// of its own (control.Client, as `meshhost agent --resolver unix:PATH`
// runs) puts each roster change as a delta (PATCH /v1/roster), never the
// whole roster (PUT). When the service serves another generation than
// the agent's delta is from (here: a resolver restarted from an older
// backup), the delta is refused with spec.ErrDeltaBase, the pass fails,
// and the next pass reads the roster served and sends what it lacks; the
// resolver then serves exactly the declared roster.
func TestDeltasReachTheResolverService(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "resolver.sock")
	var svc controlService
	var stop func()
	f := newFixture(t, true, func(c *Config) {
		stop = svc.serve(t, sock, c.Resolver.(*resolver.Server))
		c.Resolver = control.NewClient(control.ClientConfig{Path: sock, Timeout: 5 * time.Second})
	})
	served := func(srv *resolver.Server, what string) {
		t.Helper()
		want, _ := f.source.Roster()
		if diff := cmp.Diff(want, srv.Roster(), cmpRoster...); diff != "" {
			t.Fatalf("%s: the resolver serves (-declared +served):\n%s", what, diff)
		}
	}

	f.push(t, declaration(1, spec.FlagOn, 2, 100))
	served(f.srv, "the first declaration")
	backup := f.srv.Roster()
	if n := svc.count("PUT", "/v1/roster"); n != 0 {
		t.Errorf("the first roster was PUT %d times, want it sent as a delta from 0", n)
	}
	svc.reset()
	rep := f.push(t, deltaDoc(2, 1, 2, map[string]string{"new.internal": "10.99.0.1"}, "svc7.node7.internal"))
	if rep.RosterGeneration != 2 {
		t.Fatalf("roster %d in force after the delta, want 2", rep.RosterGeneration)
	}
	served(f.srv, "a delta")
	if put, patch := svc.count("PUT", "/v1/roster"), svc.count("PATCH", "/v1/roster"); put != 0 || patch != 1 {
		t.Errorf("a one-name change: %d PUT, %d PATCH of the roster; want 0 and 1", put, patch)
	}

	// The service restarts from an older roster: generation 1.
	stop()
	f.srv.Close()
	srv2, err := resolver.New(resolver.Config{StatePath: filepath.Join(t.TempDir(), "roster.json"), Upstreams: f.srvUpstreams()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Close() })
	if err := srv2.Update(backup); err != nil {
		t.Fatal(err)
	}
	svc.serve(t, sock, srv2)
	svc.reset()

	if _, err := f.source.Offer(deltaDoc(3, 2, 3, map[string]string{"newer.internal": "10.99.0.2"}), "test"); err != nil {
		t.Fatal(err)
	}
	_, err = f.agent.Pass(context.Background())
	if !errors.Is(err, spec.ErrDeltaBase) {
		t.Fatalf("a pass whose delta (2 -> 3) the resolver cannot apply (it serves 1) = %v, want spec.ErrDeltaBase", err)
	}
	if g := srv2.Generation(); g != 1 {
		t.Fatalf("the refused delta changed the resolver: serving %d, want 1", g)
	}
	rep, err = f.agent.Pass(context.Background())
	if err != nil {
		t.Fatalf("the pass after the refusal: %v", err)
	}
	if rep.RosterGeneration != 3 {
		t.Errorf("roster %d in force after the refusal, want 3", rep.RosterGeneration)
	}
	served(srv2, "after the refused delta")
	if put := svc.count("PUT", "/v1/roster"); put != 0 {
		t.Errorf("%d whole rosters PUT; want the missing change sent as a delta", put)
	}
	if got := srv2.Roster().Names["svc7.node7.internal"]; got != nil {
		t.Errorf("svc7, removed at generation 2, is served at %v", got)
	}
	if got := srv2.Roster().Names["new.internal"]; !slices.Equal(got, []netip.Addr{netip.MustParseAddr("10.99.0.1")}) {
		t.Errorf("new.internal, added at generation 2, is served at %v", got)
	}
}

// wholeResolver is control.Client sending whole rosters (Update), as the
// agent did before the client took deltas: its Apply reads the roster
// served, changes it by the delta and PUTs all of it.
type wholeResolver struct{ *control.Client }

func (w wholeResolver) Apply(d *spec.RosterDelta) error {
	r, err := w.RosterContext(context.Background())
	if err != nil {
		return err
	}
	return applyWhole(r, d, w.Update)
}

// BenchmarkRosterPushService100k times what a roster change of one name
// costs, at 100,000 names and 2 containers, with the resolver a service
// of its own behind its control socket (in this process): the
// declaration delta offered, and the pass that puts it in force and saves
// it (agent, resolver, journal). "delta" is control.Client (PATCH, the
// one name); "whole" the same client sending whole rosters (wholeResolver:
// it reads the roster served, changes it and PUTs all of it; the resolver
// parses and diffs it). cpu-µs/op is the process's CPU: agent and resolver.
func BenchmarkRosterPushService100k(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"delta", "whole"} {
		b.Run(kind, func(b *testing.B) {
			j, err := journal.Open(b.TempDir(), journal.Options{})
			if err != nil {
				b.Fatal(err)
			}
			sock := filepath.Join(b.TempDir(), "resolver.sock")
			var svc controlService
			f := newFixture(b, true, func(c *Config) {
				c.Journal = j
				svc.serve(b, sock, c.Resolver.(*resolver.Server))
				c.Resolver = control.NewClient(control.ClientConfig{Path: sock, Timeout: 10 * time.Second})
				if kind == "whole" {
					c.Resolver = wholeResolver{c.Resolver.(*control.Client)}
				}
			})
			f.push(b, declaration(1, spec.FlagOn, 2, 100000))
			gen := uint64(1)
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				gen++
				doc := fmt.Appendf(nil, `{"schema": 1, "machine": "ace", "generation": %d, "roster_delta": {"from": %d, "generation": %d, "set": {"moved%d.internal": ["10.200.0.1"]}}}`, gen, gen-1, gen, gen)
				b.StartTimer()
				c0 := cpuNow(b)
				if _, err := f.source.Offer(doc, "bench"); err != nil {
					b.Fatal(err)
				}
				rep, err := f.agent.Pass(ctx)
				if err != nil {
					b.Fatal(err)
				}
				cpu += cpuNow(b) - c0
				b.StopTimer()
				if rep.RosterGeneration != gen || f.srv.Generation() != gen {
					b.Fatalf("roster %d in force, the resolver serves %d; want %d", rep.RosterGeneration, f.srv.Generation(), gen)
				}
				b.StartTimer()
			}
			b.StopTimer()
			if put, patch := svc.count("PUT", "/v1/roster"), svc.count("PATCH", "/v1/roster"); kind == "delta" && put != 0 || kind == "whole" && patch != 0 {
				b.Fatalf("%s: %d PUT, %d PATCH of the roster", kind, put, patch)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
