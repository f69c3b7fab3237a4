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
	pending      *prometheus.GaugeVec // by PendingReason
	budgetLimit  prometheus.Gauge
	budgetWindow prometheus.Gauge
}

// Reasons a replacement is pending, the values of
// meshhost_reconcile_replacements_pending's reason label.
const (
	// PendingBudget: deferred by the last pass because the budget was spent.
	PendingBudget = "budget"
	// PendingHeld: held back before Apply by whoever plans the pass (the
	// agent's blast-radius hold), reported with Reconciler.ReportHeld.
	PendingHeld = "held"
)

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
			Help: "Replacements and removals begun within the current budget window.",
		}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_reconcile_deferred_total",
			Help: "Replacements and removals deferred to a later pass because the budget was spent.",
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
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshhost_reconcile_replacements_pending",
			Help: "Replacements and removals the last pass wanted and did not begin, by reason: budget (deferred, the budget was spent) or held (a hold waits for an operator).",
		}, []string{"reason"}),
		budgetLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_reconcile_budget_limit",
			Help: "Replacements and removals the budget allows to begin within a window (--budget).",
		}),
		budgetWindow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_reconcile_budget_window_seconds",
			Help: "The replacement budget's window (--budget-window).",
		}),
	}
	// Every kind and reason at 0 from the start, so a dashboard never shows
	// "no data".
	for _, k := range kinds {
		m.actions.WithLabelValues(string(k))
		m.errors.WithLabelValues(string(k))
	}
	for _, r := range []string{PendingBudget, PendingHeld} {
		m.pending.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.actions, m.errors, m.replacements, m.budgetUsed, m.deferred, m.passDuration, m.panics,
		m.pending, m.budgetLimit, m.budgetWindow} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("reconcile: registering metrics (one Reconciler per Registerer): %w", err)
		}
	}
	return m, nil
}
