package agent

import (
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/setaside"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	passes      *prometheus.CounterVec
	duration    prometheus.Histogram
	declaration prometheus.Gauge
	rosterHeld  prometheus.Gauge
	panics      prometheus.Counter
	lastSuccess prometheus.Gauge
	passNumber  prometheus.Gauge

	held             prometheus.Gauge
	heldReplacements prometheus.Gauge
	heldRemovals     prometheus.Gauge
	frozen           prometheus.Gauge
}

// newMetrics returns the agent's metrics, registered with reg (nil: none).
// The last success starts at started, the agent's start: its age is the
// time without a pass that succeeded from the first moment, never the age
// of Unix time 0 (an alert on it fired after every restart).
func newMetrics(reg prometheus.Registerer, state statedir.Dir, started time.Time) (*metrics, error) {
	m := &metrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshhost_agent_passes_total", Help: "Agent passes, by result (ok or error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "meshhost_agent_pass_duration_seconds", Help: "Duration of an agent pass: roster, gate, reconcile.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		declaration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_declaration_generation", Help: "Generation of the declaration last applied.",
		}),
		rosterHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_roster_held", Help: "1 while a declared roster is held for dropping too many names at once.",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_agent_pass_panics_total", Help: "Agent passes that panicked (a bug); recovered, and counted among the failed passes too.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_last_success_timestamp_seconds",
			Help: "When the last pass that succeeded ended (Unix time); before the first, when the agent started. Alert on its age: the machine has not converged since (or since the start).",
		}),
		passNumber: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_pass_number", Help: "The number of the pass begun last: the pass= of its log lines, its number in meshhost history.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_declaration_held", Help: "1 while the declaration in force is held for replacing and removing more than --hold-above containers (meshhost approve GEN releases it).",
		}),
		heldReplacements: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_held_replacements", Help: "Replacements the held declaration would make; 0 when none is held.",
		}),
		heldRemovals: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_held_removals", Help: "Removals the held declaration would make; 0 when none is held.",
		}),
		frozen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_agent_frozen", Help: "1 while the machine is frozen (meshhost freeze): no container is created, replaced or removed.",
		}),
	}
	m.lastSuccess.Set(unixSeconds(started))
	m.passes.WithLabelValues("ok") // both results at 0 from the start
	m.passes.WithLabelValues("error")
	if reg != nil {
		// Every damaged log of the state directory (the journal's too),
		// as `meshhost status` lists them.
		corrupt := setaside.New(state.Path(), state.Logs(), state.SetAside)
		for _, c := range []prometheus.Collector{m.passes, m.duration, m.declaration, m.rosterHeld, m.panics, m.lastSuccess, m.passNumber, m.held, m.heldReplacements, m.heldRemovals, m.frozen, corrupt} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// pass counts a pass that ended at end, after d, with err.
func (m *metrics) pass(err error, d time.Duration, end time.Time) {
	result := "ok"
	if err != nil {
		result = "error"
	} else {
		m.lastSuccess.Set(unixSeconds(end))
	}
	m.passes.WithLabelValues(result).Inc()
	m.duration.Observe(d.Seconds())
}

// unixSeconds is t as Unix time in seconds, fractions kept.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
