package agent

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// panicky is a runtime whose List panics once when armed, as a bug in a
// runtime adapter would.
type panicky struct {
	reconcile.Runtime
	armed atomic.Bool
}

func (p *panicky) List(ctx context.Context) ([]reconcile.Observed, error) {
	if p.armed.CompareAndSwap(true, false) {
		var m map[string]int
		m["boom"]++ // assignment to entry in nil map
	}
	return p.Runtime.List(ctx)
}

// TestPassPanicIsRecovered: a panic inside a pass does not reach the
// agent's loop. The pass fails with the panic as its error, logged with
// its stack and counted; the containers stay as they are; the resolver
// keeps serving; the next pass applies the declaration.
func TestPassPanicIsRecovered(t *testing.T) {
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	var rt *panicky
	var afterPanics atomic.Bool
	f := newFixture(t, true, func(c *Config) {
		rt = &panicky{Runtime: c.Runtime}
		c.Runtime, c.Registerer = rt, reg
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.AfterPass = func(*Report) {
			if afterPanics.CompareAndSwap(true, false) {
				panic("saving the budget")
			}
		}
	})
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	before := ids(f.rt)

	if _, err := f.source.Offer(declaration(2, spec.FlagOff, 3, 11), "test"); err != nil {
		t.Fatal(err)
	}
	rt.armed.Store(true)
	_, err := f.agent.Pass(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the pass panicked: assignment to entry in nil map") {
		t.Fatalf("Pass with a panicking runtime = %v, want the panic as its error", err)
	}
	if after := ids(f.rt); !maps.Equal(before, after) {
		t.Errorf("containers changed by the panicking pass: %v -> %v", before, after)
	}
	if !strings.Contains(logs.String(), "the pass panicked") || !strings.Contains(logs.String(), "panic_test.go") {
		t.Errorf("the log lacks the panic and its stack:\n%s", logs.String())
	}
	if got := counter(t, reg, "meshhost_agent_pass_panics_total"); got != 1 {
		t.Errorf("meshhost_agent_pass_panics_total = %v, want 1", got)
	}
	if err := f.agent.Health(); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("Health after a panicking pass = %v, want the panic", err)
	}
	if !f.srv.Serving() {
		t.Error("the resolver stopped serving")
	}

	rep, err := f.agent.Pass(context.Background())
	if err != nil {
		t.Fatalf("the pass after the panic: %v", err)
	}
	if rep.Generation != 2 || len(ids(f.rt)) != 3 {
		t.Errorf("the pass after the panic applied generation %d with %d containers, want 2 with 3", rep.Generation, len(ids(f.rt)))
	}

	// What runs after a pass (the agent command saves the budget there).
	afterPanics.Store(true)
	if _, err := f.agent.Pass(context.Background()); err != nil {
		t.Errorf("a pass whose AfterPass panics: %v, want the pass's own result", err)
	}
	if err := f.agent.Health(); err == nil || !strings.Contains(err.Error(), "saving the pass's state panicked") {
		t.Errorf("Health after AfterPass panicked = %v, want the panic", err)
	}
	if got := counter(t, reg, "meshhost_agent_pass_panics_total"); got != 2 {
		t.Errorf("meshhost_agent_pass_panics_total = %v, want 2", got)
	}
}

// TestZoneApexNameAtAgent is issue 17's third bug as a machine saw it: a
// declaration whose roster names one of its zones panicked the pass, and
// the restarted agent, which had saved the declaration, panicked again at
// every start. Now the pass succeeds, the name resolves, and an agent
// restarted on the state directory loads both and passes.
func TestZoneApexNameAtAgent(t *testing.T) {
	f := newFixture(t, true)
	doc := strings.Replace(string(declaration(1, spec.FlagOn, 2, 3)), `"names": {`, `"names": {"internal": ["100.64.0.1"], `, 1)
	f.push(t, []byte(doc))
	if got := f.srv.Roster().Names["internal"]; len(got) != 1 || got[0] != netip.MustParseAddr("100.64.0.1") {
		t.Errorf("the resolver serves the apex as %v, want 100.64.0.1", got)
	}

	d, err := LoadDeclaration(statedir.New(f.state))
	if err != nil || d.Generation != 1 {
		t.Fatalf("LoadDeclaration = %v, %v", d, err)
	}
	srv, err := resolver.New(resolver.Config{StatePath: filepath.Join(f.state, "roster.json"), Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
	if err != nil {
		t.Fatalf("a restarted resolver: %v", err)
	}
	defer srv.Close()
	if _, ok := srv.Roster().Names["internal"]; !ok {
		t.Error("the restarted resolver lacks the apex name")
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
