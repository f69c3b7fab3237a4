package reconcile_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/testkit/metriclint"
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
		"meshhost_reconcile_actions_total{kind=create}":          2,
		"meshhost_reconcile_actions_total{kind=replace}":         1,
		"meshhost_reconcile_budget_used":                         1,
		"meshhost_reconcile_deferred_total":                      1,
		"meshhost_reconcile_replacements_total":                  1,
		"meshhost_reconcile_pass_duration_seconds_count":         2,
		"meshhost_reconcile_budget_limit":                        1,
		"meshhost_reconcile_budget_window_seconds":               3600,
		"meshhost_reconcile_replacements_pending{reason=budget}": 1,
	}
	for name, v := range got {
		if v == 0 {
			delete(got, name) // pre-initialised, checked below
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	// Names, units, _total and labels keep Prometheus' conventions.
	problems, err := metriclint.Gathered(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// Every kind is there from the start, at 0 when nothing happened.
	for _, k := range []string{"keep", "create", "start", "update", "replace", "remove", "adopt", "resume", "rollback", "conflict"} {
		for _, m := range []string{"meshhost_reconcile_actions_total", "meshhost_reconcile_errors_total"} {
			if name := m + "{kind=" + k + "}"; !labelled[name] {
				t.Errorf("%s is not pre-initialised", name)
			}
		}
	}
	for _, r := range []string{"budget", "held"} {
		if name := "meshhost_reconcile_replacements_pending{reason=" + r + "}"; !labelled[name] {
			t.Errorf("%s is not pre-initialised", name)
		}
	}
	// The budget pacing is no fault: a deferral is logged at info.
	for _, want := range []string{`container=a kind=replace reason="image: img:1 -> img:2"`, `level=INFO msg="replacement deferred`, "duration_seconds=", "budget_limit=1 budget_window_seconds=3600"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}

// TestReplacementsPending: meshhost_reconcile_replacements_pending says
// how many replacements the last pass left to the budget (back to 0 once
// they began) and how many are held (ReportHeld).
func TestReplacementsPending(t *testing.T) {
	rt := memory.New(memory.Options{})
	reg := prometheus.NewRegistry()
	clock := newClock()
	r := newReconciler(t, rt, func(c *reconcile.Config) {
		c.Registerer = reg
		c.Now = clock.Now
		c.Budget = reconcile.Budget{Max: 1, Window: time.Minute}
	})
	pending := func(reason string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "meshhost_reconcile_replacements_pending" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == reason {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no meshhost_reconcile_replacements_pending{reason=%q}", reason)
		return 0
	}
	cs := []spec.Container{container("a", "img:1"), container("b", "img:1"), container("c", "img:1")}
	mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
	if got := pending("budget"); got != 0 {
		t.Errorf("after creating three: budget pending %v, want 0 (creating is never charged)", got)
	}
	for i := range cs {
		cs[i].Image = "img:2"
	}
	for i, want := range []float64{2, 1, 0} {
		mustReconcile(t, r, renderAll(t, cs, nil, resolveMode))
		if got := pending("budget"); got != want {
			t.Errorf("pass %d of the new image: budget pending %v, want %v", i+1, got, want)
		}
		clock.Advance(time.Minute)
	}
	r.ReportHeld(4)
	if got := pending("held"); got != 4 {
		t.Errorf("after ReportHeld(4): held pending %v, want 4", got)
	}
	r.ReportHeld(0)
	if got := pending("held"); got != 0 {
		t.Errorf("after ReportHeld(0): held pending %v, want 0", got)
	}
}
