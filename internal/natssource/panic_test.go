package natssource

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/spec"
)

// panickySink is the agent's declaration source, panicking once when it
// is handed roster generation at (whole or as a delta), when where is
// "sink"; onChange panics once at that generation when where is
// "OnChange".
type panickySink struct {
	*declsource.Source
	where string
	at    uint64

	// mu guards the fields below.
	mu       sync.Mutex
	panicked bool
}

func (s *panickySink) maybePanic(where string, gen uint64) {
	s.mu.Lock()
	now := s.where == where && gen == s.at && !s.panicked
	s.panicked = s.panicked || now
	s.mu.Unlock()
	if now {
		panic(fmt.Sprintf("%s bug at roster generation %d", where, gen))
	}
}

func (s *panickySink) Put(d *spec.Declaration, origin string) error {
	s.maybePanic("sink", d.Roster.Generation)
	return s.Source.Put(d, origin)
}

func (s *panickySink) PutRosterDelta(machine string, declGen uint64, d *spec.RosterDelta, origin string) error {
	s.maybePanic("sink", d.To)
	return s.Source.PutRosterDelta(machine, declGen, d, origin)
}

func (s *panickySink) onChange(ch *Change) { s.maybePanic("OnChange", ch.Generation) }

// TestWatchSurvivesAPanic: a panic on the watch's goroutine, in the sink
// (the agent's declaration source) or in OnChange, used to end the
// process (the agent's, its in-process resolver with it). It is
// recovered, logged with its stack and counted
// (meshhost_natssource_panics_total, 0 until then); the roster in force
// stays meanwhile; the watch is opened again, the buckets read whole, and
// the sink gets the generation it was handed when it panicked, whole; the
// commits after it are applied as before.
func TestWatchSurvivesAPanic(t *testing.T) {
	for _, where := range []string{"sink", "OnChange"} {
		t.Run(where, func(t *testing.T) {
			url := sharedURL(t)
			l := testLayout(t, url)
			p := newPublisher(t, url, l)
			ctx := context.Background()
			r := roster(50)
			publishRoster(t, p, 1, r)
			decl := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff, Roster: &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
				Containers: []spec.Container{{Name: "app", Image: "busybox"}}}
			if _, err := p.PublishDeclaration(ctx, decl); err != nil {
				t.Fatal(err)
			}
			sink := &panickySink{Source: declsource.New(declsource.Config{Machine: "ace", Registerer: prometheus.NewRegistry()}), where: where, at: 2}
			var logs syncbuf.Buffer
			w := startWatcher(t, Config{Server: Server{URL: url}, Layout: l, Machine: "ace", Sink: sink, OnChange: sink.onChange,
				Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			inForce := func(gen uint64, want map[string][]netip.Addr) {
				t.Helper()
				waitFor(t, 30*time.Second, fmt.Sprintf("the sink holding roster generation %d", gen), func() bool {
					got, _ := sink.Roster()
					return got != nil && got.Generation == gen
				})
				got, _ := sink.Roster()
				if diff := cmp.Diff(want, got.Names, addrCmp); diff != "" {
					t.Fatalf("roster generation %d in the sink (-published +sink):\n%s", gen, diff)
				}
				if h, _ := sink.Head(); h.Declaration.Generation != 7 {
					t.Fatalf("the sink holds declaration %d, want 7", h.Declaration.Generation)
				}
			}
			inForce(1, r)
			if got := metricValue(w.metrics.panics); got != 0 {
				t.Fatalf("meshhost_natssource_panics_total = %v before any panic, want 0", got)
			}

			// Generation 2 panics the sink (or OnChange) when handed over.
			r2 := maps.Clone(r)
			r2["h5.internal"] = addrs("10.99.0.5")
			if _, err := p.PublishDelta(ctx, Delta{Generation: 2, Set: map[string][]netip.Addr{"h5.internal": addrs("10.99.0.5")}}); err != nil {
				t.Fatal(err)
			}
			inForce(2, r2)
			if got := metricValue(w.metrics.panics); got != 1 {
				t.Errorf("meshhost_natssource_panics_total = %v, want 1", got)
			}
			if sn := w.Snapshot(); sn == nil || sn.Generation != 2 || !cmp.Equal(r2, sn.Names, addrCmp) {
				t.Errorf("the watcher's roster in force after the panic = %+v, want generation 2 as published", sn)
			}
			if l := logs.String(); !strings.Contains(l, "panicked; the roster in force stays") || !strings.Contains(l, "panic_test.go") {
				t.Errorf("the panic is not logged with its stack:\n%s", l)
			}

			// The watch goes on.
			r3 := maps.Clone(r2)
			delete(r3, "h1.internal")
			r3["h6.internal"] = addrs("10.99.0.6")
			if _, err := p.PublishDelta(ctx, Delta{Generation: 3, Set: map[string][]netip.Addr{"h6.internal": addrs("10.99.0.6")}, Removed: []string{"h1.internal"}}); err != nil {
				t.Fatal(err)
			}
			inForce(3, r3)
			if err := w.Health(); err != nil {
				t.Errorf("Health = %v", err)
			}
		})
	}
}
