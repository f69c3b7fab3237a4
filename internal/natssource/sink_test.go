package natssource

import (
	"context"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/spec"
)

var _ DeltaSink = (*declsource.Source)(nil)

// TestWatchDeltasToSource: against a real server, with the agent's own
// declsource.Source as the sink. A one-name roster commit reaches the
// Source as that one name (a delta, not Whole, at the declaration
// generation in force); a change of the machine's declaration arrives
// whole; and after every commit of a random sequence (deltas of a few
// names, whole rosters, zones changes, declaration changes) the roster the
// Source holds is the one published.
func TestWatchDeltasToSource(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	ctx := context.Background()
	src := declsource.New(declsource.Config{Machine: "ace", Registerer: prometheus.NewRegistry()})
	r := roster(500)
	publishRoster(t, p, 1, r)
	decl := func(gen uint64) *spec.Declaration {
		return &spec.Declaration{Schema: 1, Machine: "ace", Generation: gen, MeshNames: spec.FlagOff, Roster: &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
			Containers: []spec.Container{{Name: "app", Image: "busybox"}}}
	}
	if _, err := p.PublishDeclaration(ctx, decl(7)); err != nil {
		t.Fatal(err)
	}
	startWatcher(t, Config{Server: Server{URL: url}, Layout: l, Machine: "ace", Sink: src, Registerer: prometheus.NewRegistry()})

	// inForce waits for roster generation gen with declaration generation
	// declGen in the Source, and returns the Changes it took since seq.
	inForce := func(declGen, gen, seq uint64) []declsource.Change {
		t.Helper()
		waitFor(t, 20*time.Second, "the Source taking roster generation", func() bool {
			h, ok := src.Head()
			return ok && h.Declaration.Roster.Generation == gen && h.Declaration.Generation == declGen
		})
		changes, ok := src.ChangesSince(seq)
		if !ok {
			t.Fatalf("ChangesSince(%d): not kept", seq)
		}
		return changes
	}
	same := func(gen uint64, want map[string][]netip.Addr, zones []string) {
		t.Helper()
		got, _ := src.Roster()
		if diff := cmp.Diff(want, got.Names, addrCmp); diff != "" || got.Generation != gen {
			t.Fatalf("roster generation %d in the Source, want %d (-published +Source):\n%s", got.Generation, gen, diff)
		}
		if !slices.Equal(zones, got.Zones) {
			t.Fatalf("zones in the Source %v, want %v", got.Zones, zones)
		}
	}
	changes := inForce(7, 1, 0)
	if len(changes) != 1 || !changes[0].Whole {
		t.Fatalf("first delivery: %+v; want one whole declaration", changes)
	}
	same(1, r, []string{"internal"})
	seq := changes[0].Seq

	// One name moves: the Source takes that name, as a delta.
	r["h5.internal"] = addrs("10.99.0.5")
	if _, err := p.PublishDelta(ctx, Delta{Generation: 2, Set: map[string][]netip.Addr{"h5.internal": addrs("10.99.0.5")}}); err != nil {
		t.Fatal(err)
	}
	changes = inForce(7, 2, seq)
	if len(changes) != 1 {
		t.Fatalf("one-name commit: %d changes, want 1", len(changes))
	}
	if c := changes[0]; c.Whole || c.Generation != 7 || c.Roster.From != 1 || c.Roster.To != 2 || c.Roster.Len() != 1 || c.Roster.Set["h5.internal"] == nil {
		t.Fatalf("one-name commit recorded as %+v, roster %+v; want a delta of h5 alone at declaration 7", c, c.Roster)
	}
	same(2, r, []string{"internal"})
	seq = changes[0].Seq

	// A random sequence, the Source compared with the bucket after each.
	rng := rand.New(rand.NewPCG(16, 1))
	declGen, zones := uint64(7), []string{"internal"}
	deltas, wholes := 0, 0
	for gen := uint64(3); gen <= 40; gen++ {
		var d Delta
		r, d = change(rng, r, 1+rng.IntN(5), 700)
		d.Generation = gen
		switch rng.IntN(8) {
		case 0: // the machine's declaration changes too: put whole
			declGen++
			if _, err := p.PublishDeclaration(ctx, decl(declGen)); err != nil {
				t.Fatal(err)
			}
		case 1: // the zones change
			if len(zones) == 1 {
				zones = []string{"internal", "mesh"}
			} else {
				zones = []string{"internal"}
			}
			d.Zones = zones
		}
		if rng.IntN(6) == 0 {
			if _, err := p.PublishRoster(ctx, &spec.Roster{Generation: gen, Zones: zones, Names: maps.Clone(r)}); err != nil {
				t.Fatalf("PublishRoster(%d): %v", gen, err)
			}
		} else if _, err := p.PublishDelta(ctx, d); err != nil {
			t.Fatalf("PublishDelta(%d): %v", gen, err)
		}
		for _, c := range inForce(declGen, gen, seq) {
			if c.Whole {
				wholes++
			} else {
				deltas++
			}
			seq = c.Seq
		}
		same(gen, r, zones)
	}
	if deltas < 20 {
		t.Errorf("%d roster changes reached the Source as deltas (%d whole); want most of the 38", deltas, wholes)
	}
	t.Logf("%d deltas, %d whole", deltas, wholes)

	// The Source's roster moved by another way (a gap for the watcher):
	// the next commit does not apply to it as a delta, and is put whole.
	side := decl(declGen)
	side.Roster = &spec.Roster{Generation: 41, Zones: zones, Names: maps.Clone(r)}
	if err := src.Put(side, "test"); err != nil {
		t.Fatal(err)
	}
	seq = inForce(declGen, 41, seq)[0].Seq
	r, d := change(rng, r, 1, 700)
	d.Generation = 43
	if _, err := p.PublishDelta(ctx, d); err != nil {
		t.Fatal(err)
	}
	if changes := inForce(declGen, 43, seq); len(changes) != 1 || !changes[0].Whole {
		t.Errorf("a commit after a gap: %+v, want one whole declaration", changes)
	}
	same(43, r, zones)
}
