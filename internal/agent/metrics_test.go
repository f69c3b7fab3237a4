package agent

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshhost/meshhost/spec"
)

// TestLastSuccessTimestamp: meshhost_agent_last_success_timestamp_seconds is
// the agent's start until a pass succeeds (never 0: its age, about 56
// years, fired MeshhostAgentNotConverging after every restart), then the
// end of the last pass that succeeded; a
// failed pass leaves it where it was, so its age says how long the machine
// has not converged.
func TestLastSuccessTimestamp(t *testing.T) {
	reg := prometheus.NewRegistry()
	var rt *panicky
	created := float64(time.Now().UnixNano()) / 1e9
	f := newFixture(t, true, func(c *Config) {
		rt = &panicky{Runtime: c.Runtime}
		c.Runtime, c.Registerer = rt, reg
	})
	last := func() float64 {
		t.Helper()
		n, err := testutil.GatherAndCount(reg, "meshhost_agent_last_success_timestamp_seconds")
		if err != nil || n != 1 {
			t.Fatalf("meshhost_agent_last_success_timestamp_seconds: %d series, %v; want 1", n, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "meshhost_agent_last_success_timestamp_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	if got, now := last(), float64(time.Now().UnixNano())/1e9; got < created || got > now {
		t.Fatalf("before any pass: %v, want the agent's start, within [%v, %v]", got, created, now)
	}

	before := float64(time.Now().UnixNano()) / 1e9
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	after := float64(time.Now().UnixNano()) / 1e9
	ok := last()
	if ok < before || ok > after {
		t.Fatalf("after a successful pass: %v, want within [%v, %v]", ok, before, after)
	}

	if _, err := f.source.Offer(declaration(2, spec.FlagOn, 3, 10), "test"); err != nil {
		t.Fatal(err)
	}
	rt.armed.Store(true) // the pass fails (a recovered panic)
	if _, err := f.agent.Pass(context.Background()); err == nil {
		t.Fatal("the armed pass succeeded")
	}
	if got := last(); got != ok {
		t.Errorf("after a failed pass: %v, want the last success %v", got, ok)
	}
	if got := testutil.ToFloat64(f.agent.metrics.passes.WithLabelValues("error")); got != 1 {
		t.Errorf(`meshhost_agent_passes_total{result="error"} = %v, want 1`, got)
	}
}
