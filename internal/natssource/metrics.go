package natssource

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connected    prometheus.Gauge
	rosterGen    prometheus.Gauge
	rosterRev    prometheus.Gauge
	declaration  prometheus.Gauge
	commits      *prometheus.CounterVec
	declarations *prometheus.CounterVec
	resumes      prometheus.Counter
	resyncs      prometheus.Counter
	panics       prometheus.Counter
	behind       prometheus.Gauge
	server       *prometheus.GaugeVec
	// health returns how long the watch has not been live.
	health func() time.Duration
	// refused returns how long commits have been refused without one
	// put in force.
	refused func() time.Duration
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_natssource_live", Help: "1 while the watch of the roster source is live (connected and reading).",
		}),
		rosterGen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_natssource_roster_generation", Help: "Roster generation in force from the NATS source.",
		}),
		rosterRev: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_natssource_roster_revision", Help: "Bucket revision the roster in force was committed through.",
		}),
		declaration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_natssource_declaration_generation", Help: "Generation of the machine's declaration read from the NATS source.",
		}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshhost_natssource_commits_total", Help: "Roster commit records, by result: applied, or refused as stale, invalid or inconsistent.",
		}, []string{"result"}),
		declarations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshhost_natssource_declarations_total", Help: "Machine declarations read, by result: applied, stale or invalid.",
		}, []string{"result"}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_natssource_resumes_total", Help: "Roster watches resumed after the last revision read (after a disconnect or a stall).",
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_natssource_resyncs_total", Help: "Times the roster bucket was read whole again (recreated, rewound, or a commit that did not add up).",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_natssource_panics_total", Help: "Roster watches that panicked (a bug, in the watcher or its sink); recovered: the roster in force stays, and the buckets are read whole again.",
		}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_natssource_behind_revisions", Help: "Revisions of the roster bucket past the last one the watch read, as its server last counted them; 0 when caught up.",
		}),
		server: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshhost_natssource_server_info", Help: "The NATS server the watch reads from (its name and URL, without credentials): 1 while live, 0 once cut off from it.",
		}, []string{"server", "url"}),
	}
	for _, r := range []string{"applied", reasonStale, reasonInvalid, reasonInconsistent} {
		m.commits.WithLabelValues(r)
	}
	for _, r := range []string{"applied", reasonStale, reasonInvalid} {
		m.declarations.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	unreachable := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshhost_natssource_unreachable_seconds", Help: "Seconds since the watch of the roster source was last live; 0 while it is.",
	}, func() float64 {
		if m.health == nil {
			return 0
		}
		return m.health().Seconds()
	})
	refused := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshhost_natssource_refused_seconds", Help: "Seconds since the first of the roster commits or machine declarations refused without one put in force since; 0 while none is refused. The counts by reason are meshhost_natssource_commits_total and meshhost_natssource_declarations_total.",
	}, func() float64 {
		if m.refused == nil {
			return 0
		}
		return m.refused().Seconds()
	})
	for _, c := range []prometheus.Collector{m.connected, m.rosterGen, m.rosterRev, m.declaration, m.commits, m.declarations, m.resumes, m.resyncs, m.panics, m.behind, m.server, unreachable, refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) rosterApplied(gen, rev uint64) {
	m.rosterGen.Set(float64(gen))
	m.rosterRev.Set(float64(rev))
}
