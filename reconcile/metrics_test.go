package reconcile_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

func TestMetricsLogsJournal(t *testing.T) {
	rt := memory.New(memory.Options{})
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	j, err := journal.Open(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := newReconciler(t, rt, func(c *reconcile.Config) {
		c.Registerer, c.Journal = reg, j
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Budget = reconcile.Budget{Max: 1, Window: time.Hour}
	})
	cs := []spec.Container{container("a", "img:1"), container("b", "img:1")}
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
	cs[0].Image, cs[1].Image = "img:2", "img:2"
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))

	got := map[string]float64{}
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
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	for _, want := range []string{`container=a kind=replace reason="image: img:1 -> img:2"`, "replacement deferred", "duration="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	passes, err := j.Passes()
	if err != nil || len(passes) != 2 {
		t.Fatalf("journal passes = %d, %v; want 2", len(passes), err)
	}
	if p := passes[1]; p.Deferred != 1 || len(p.Actions) != 2 || p.Actions[0].Reason != "image: img:1 -> img:2" {
		t.Errorf("second pass in the journal = %+v", p)
	}
}
