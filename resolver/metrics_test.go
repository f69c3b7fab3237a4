package resolver

import (
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	up := startStub(t, upstreamAnswer)
	s, addr := newTestServer(t, testRoster(7), Config{Registerer: reg, Upstreams: []netip.AddrPort{up.addr}})
	_ = s
	// Counters without labels exist from the start, at 0.
	initial := gather(t, reg)
	for _, name := range []string{
		"meshhost_resolver_cache_hits_total", "meshhost_resolver_cache_misses_total",
		"meshhost_resolver_cache_evictions_total", "meshhost_resolver_cache_flushes_total",
		"meshhost_resolver_cache_entries", "meshhost_resolver_upstream_failures_total",
		"meshhost_resolver_forwarded_total",
	} {
		if v, ok := initial[name]; !ok || v != 0 {
			t.Errorf("before any query, %s = %v (present: %v), want 0", name, v, ok)
		}
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"gitea.novox.internal.", 1}, {"gitea.novox.internal.", 1}, {"nope.novox.internal.", 1},
		{"gitea.novox.internal.", 28}, {"example.com.", 1}, {"example.com.", 1},
	} {
		if exchangeRaw(t, addr, packQuery(t, q.name, q.qtype, false)) == nil {
			t.Fatalf("%s: no answer", q.name)
		}
	}
	got := gather(t, reg)
	for key, want := range map[string]float64{
		"meshhost_resolver_queries_total,qtype=A,rcode=NOERROR":    4, // two mesh, two forwarded
		"meshhost_resolver_queries_total,qtype=A,rcode=NXDOMAIN":   1,
		"meshhost_resolver_queries_total,qtype=AAAA,rcode=NOERROR": 1,
		"meshhost_resolver_forwarded_total":                        1, // the second from the cache
		"meshhost_resolver_cache_misses_total":                     1,
		"meshhost_resolver_cache_hits_total":                       1,
		"meshhost_resolver_cache_entries":                          1,
		"meshhost_resolver_upstream_latency_seconds":               1,
		"meshhost_resolver_roster_generation":                      7,
		"meshhost_resolver_swap_duration_seconds":                  1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}

// gather returns every metric of reg, keyed by name and labels.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}
