package reconcile_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// TestMetricsAndLogs checks the metrics and log lines of two passes, the
// second replacing one container and deferring the other; the agent
// journals passes (internal/agent's TestJournalRecordsPassesWithGeneration).
func TestMetricsAndLogs(t *testing.T) {
	rt := memory.New(memory.Options{})
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	r := newReconciler(t, rt, func(c *reconcile.Config) {
		c.Registerer = reg
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Budget = reconcile.Budget{Max: 1, Window: time.Hour}
	})
	cs := []spec.Container{container("a", "img:1"), container("b", "img:1")}
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
	cs[0].Image, cs[1].Image = "img:2", "img:2"
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))

	got := map[string]float64{}
	labelled := map[string]bool{} // metric{label=value} present, zero or not
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			labelled[name] = true
			switch {
			case m.Counter != nil:
				got[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[name] = m.Gauge.GetValue()
			case m.Histogram != nil:
				got[name+"_count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"meshhost_reconcile_actions_total{kind=create}":  2,
		"meshhost_reconcile_actions_total{kind=replace}": 1,
		"meshhost_reconcile_budget_used":                 1,
		"meshhost_reconcile_deferred_total":              1,
		"meshhost_reconcile_replacements_total":          1,
		"meshhost_reconcile_pass_duration_seconds_count": 2,
	}
	for name, v := range got {
		if v == 0 {
			delete(got, name) // pre-initialised, checked below
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	// Every kind is there from the start, at 0 when nothing happened.
	for _, k := range []string{"keep", "create", "start", "update", "replace", "remove", "adopt", "resume", "rollback", "conflict"} {
		for _, m := range []string{"meshhost_reconcile_actions_total", "meshhost_reconcile_errors_total"} {
			if name := m + "{kind=" + k + "}"; !labelled[name] {
				t.Errorf("%s is not pre-initialised", name)
			}
		}
	}
	for _, want := range []string{`container=a kind=replace reason="image: img:1 -> img:2"`, "replacement deferred", "duration="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}
