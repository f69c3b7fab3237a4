package migrations

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type prometheusRegisterer = prometheus.Registerer

// metrics are the gate's: meshhost_migrations_*.
type metrics struct {
	failing *prometheus.GaugeVec
	resolve *prometheus.GaugeVec
	probes  *prometheus.CounterVec
	paused  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		failing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshhost_migrations_network_failing",
			Help: "1 for a network in resolve mode whose latest reachability probe failed.",
		}, []string{"network"}),
		resolve: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshhost_migrations_network_resolve",
			Help: "1 for a network whose containers are in resolve mode, 0 for copy mode.",
		}, []string{"network"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshhost_migrations_probes_total",
			Help: "Network reachability probes recorded, by result.",
		}, []string{"result"}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_migrations_paused",
			Help: "1 while the migration is paused (meshhost migrate pause): no container changes its name mode.",
		}),
	}
	m.probes.WithLabelValues("pass") // both results at 0 from the start
	m.probes.WithLabelValues("fail")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.failing, m.resolve, m.probes, m.paused} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	return m, nil
}

// registerCounter registers a counter of opts with reg (none when nil),
// or returns the one registered already under its name.
func registerCounter(reg prometheus.Registerer, opts prometheus.CounterOpts) (prometheus.Counter, error) {
	c := prometheus.NewCounter(opts)
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, ok := are.ExistingCollector.(prometheus.Counter)
		if !ok {
			return nil, err
		}
		return existing, nil
	}
	return c, nil
}

func (m *metrics) probe(pass bool) {
	if pass {
		m.probes.WithLabelValues("pass").Inc()
	} else {
		m.probes.WithLabelValues("fail").Inc()
	}
}

// set publishes the state of every network.
func (m *metrics) set(s *State) {
	m.paused.Set(b2f(s.Paused))
	m.failing.Reset()
	m.resolve.Reset()
	for name, ns := range s.Networks {
		if !ns.Present {
			continue
		}
		mode, _ := modeOf(s, name)
		m.failing.WithLabelValues(name).Set(b2f(mode == netFailing))
		m.resolve.WithLabelValues(name).Set(b2f(ns.Resolve))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
