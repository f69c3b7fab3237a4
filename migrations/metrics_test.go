package migrations

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/spec"
)

// TestPausedMetric: meshhost_migrations_paused follows a pause made by
// another process (meshhost migrate pause) from the agent's next update of
// the gate, and a resume.
func TestPausedMetric(t *testing.T) {
	clk := &fakeClock{t0}
	dir := t.TempDir()
	g := openGate(t, dir, clk, prometheus.NewPedanticRegistry())
	_, err := g.Observe([]Network{defaultNet})
	mustDo(t, err)
	if got := gaugeValue(t, g.metrics.paused); got != 0 {
		t.Fatalf("meshhost_migrations_paused before a pause = %v, want 0", got)
	}
	other := openGate(t, dir, clk, nil)
	mustDo(t, other.Pause())
	mustDo(t, g.SetFlag(spec.FlagOn)) // the agent's next pass
	if got := gaugeValue(t, g.metrics.paused); got != 1 {
		t.Errorf("meshhost_migrations_paused after a pause = %v, want 1", got)
	}
	mustDo(t, g.Resume())
	if got := gaugeValue(t, g.metrics.paused); got != 0 {
		t.Errorf("meshhost_migrations_paused after a resume = %v, want 0", got)
	}
}
