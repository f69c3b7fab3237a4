package migrations

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/spec"
)

// panickyProbes is fakeProbes whose RunOnce panics on the networks named,
// as a bug in a runtime adapter's probe path would.
type panickyProbes struct {
	fakeProbes
	on map[string]bool // network names
}

func (p *panickyProbes) RunOnce(ctx context.Context, r spec.Rendered) (int, string, error) {
	if p.on[r.Networks[0].Name] {
		var m map[string]int
		m["boom"]++ // assignment to entry in nil map
	}
	return p.fakeProbes.RunOnce(ctx, r)
}

// TestProbePanicFailsItsNetwork: a panic while probing one network, on
// the probe's own goroutine (where no caller's recover reaches, so it
// used to end the agent, DNS included), fails that network's probe
// alone: "probe panicked: ...", logged with its stack, counted in
// meshhost_migrations_probe_panics_total (0 from the start). The other
// networks are probed as before, and the panicked probe's container is no
// longer spared by the sweep.
func TestProbePanicFailsItsNetwork(t *testing.T) {
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	rt := &panickyProbes{fakeProbes: fakeProbes{containers: map[string]ProbeContainer{}}, on: map[string]bool{"a": true}}
	r, err := NewRunner(RunnerConfig{Runtime: rt, Exposer: mustExposer(t), Image: "img", Zone: "internal", Outside: "example.org",
		Owner: "ace", Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(r.panics); n != 0 {
		t.Fatalf("meshhost_migrations_probe_panics_total = %v before any probe, want 0", n)
	}
	if got, err := testutil.GatherAndCount(reg, "meshhost_migrations_probe_panics_total"); err != nil || got != 1 {
		t.Fatalf("meshhost_migrations_probe_panics_total not exported before a panic (%d series, %v)", got, err)
	}

	results := r.Probe(context.Background(), []Network{bridge("a", 1, false), bridge("b", 2, false)}, nil)
	type outcome struct {
		Network  string
		Pass     bool
		Panicked bool
	}
	var got []outcome
	for _, res := range results {
		got = append(got, outcome{res.Network, res.Pass, strings.HasPrefix(res.Reason, "probe panicked: ")})
	}
	// b's probe container prints nothing (fakeProbes): it fails, but is probed.
	if diff := cmp.Diff([]outcome{{"a", false, true}, {"b", false, false}}, got); diff != "" {
		t.Errorf("Probe results (-want +got):\n%s", diff)
	}
	if res := results[0]; !strings.Contains(res.Reason, "assignment to entry in nil map") || res.Kind != KindOf(bridge("a", 1, false)) || res.At.IsZero() {
		t.Errorf("the panicked probe's result = %+v, want the panic as its reason, with its network's kind and a time", res)
	}
	if n := testutil.ToFloat64(r.panics); n != 1 {
		t.Errorf("meshhost_migrations_probe_panics_total = %v, want 1", n)
	}
	if l := logs.String(); !strings.Contains(l, "a network's probe panicked") || !strings.Contains(l, "network=a") || !strings.Contains(l, "probe_panic_test.go") {
		t.Errorf("the panic is not logged with its network and stack:\n%s", l)
	}
	r.mu.Lock()
	spared := len(r.running)
	r.mu.Unlock()
	if spared != 0 {
		t.Errorf("after the round, %d probe containers are still spared from sweeps", spared)
	}

	// A Runner made again on the same Registerer (a new prober) counts on.
	r2, err := NewRunner(RunnerConfig{Runtime: rt, Exposer: mustExposer(t), Image: "img", Zone: "internal", Outside: "example.org", Registerer: reg})
	if err != nil {
		t.Fatalf("a second Runner on the same Registerer: %v", err)
	}
	r2.Probe(context.Background(), []Network{bridge("a", 1, false)}, nil)
	if n := testutil.ToFloat64(r.panics); n != 2 {
		t.Errorf("meshhost_migrations_probe_panics_total = %v after a second Runner's panic, want 2", n)
	}
}

func mustExposer(t *testing.T) *Exposer {
	t.Helper()
	e, err := NewExposer(ExposerConfig{Resolver: newFakeResolver()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
