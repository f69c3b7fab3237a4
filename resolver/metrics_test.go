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
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"gitea.novox.internal.", 1}, {"gitea.novox.internal.", 1}, {"nope.novox.internal.", 1},
		{"gitea.novox.internal.", 28}, {"example.com.", 1},
	} {
		if exchangeRaw(t, addr, packQuery(t, q.name, q.qtype, false)) == nil {
			t.Fatalf("%s: no answer", q.name)
		}
	}
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
	for key, want := range map[string]float64{
		"meshhost_resolver_queries_total,qtype=A,rcode=NOERROR":    3, // two mesh, one forwarded
		"meshhost_resolver_queries_total,qtype=A,rcode=NXDOMAIN":   1,
		"meshhost_resolver_queries_total,qtype=AAAA,rcode=NOERROR": 1,
		"meshhost_resolver_forwarded_total":                        1,
		"meshhost_resolver_upstream_latency_seconds":               1,
		"meshhost_resolver_roster_generation":                      7,
		"meshhost_resolver_swap_duration_seconds":                  1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}
