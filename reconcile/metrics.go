package reconcile

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the reconciler's Prometheus collectors. With no Registerer
// they are created but never registered, so callers need no nil checks.
type metrics struct {
	actions      *prometheus.CounterVec // by kind, completed without error
	errors       *prometheus.CounterVec // by kind
	replacements prometheus.Counter
	budgetUsed   prometheus.Gauge
	deferred     prometheus.Counter
	passDuration prometheus.Histogram
	panics       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshhost_reconcile_actions_total",
			Help: "Reconcile actions completed, by kind (keep, create, start, update, replace, remove, adopt, resume, rollback, conflict).",
		}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshhost_reconcile_errors_total",
			Help: "Reconcile actions that failed, by kind.",
		}, []string{"kind"}),
		replacements: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_reconcile_replacements_total",
			Help: "Containers replaced (a new container took over from the old one).",
		}),
		budgetUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_reconcile_budget_used",
			Help: "Replacements begun within the current budget window.",
		}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_reconcile_deferred_total",
			Help: "Replacements deferred to a later pass because the budget was spent.",
		}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshhost_reconcile_pass_duration_seconds",
			Help:    "Duration of Apply, per pass.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 9), // 10ms to ~11min
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_reconcile_panics_total",
			Help: "Actions and inspections that panicked (a bug); each failed the action alone, with the panic as its error.",
		}),
	}
	// Every kind at 0 from the start, so a dashboard never shows "no data".
	for _, k := range kinds {
		m.actions.WithLabelValues(string(k))
		m.errors.WithLabelValues(string(k))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.actions, m.errors, m.replacements, m.budgetUsed, m.deferred, m.passDuration, m.panics} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("reconcile: registering metrics (one Reconciler per Registerer): %w", err)
		}
	}
	return m, nil
}
