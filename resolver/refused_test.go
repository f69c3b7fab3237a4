package resolver

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"codeberg.org/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

func refusedCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "meshhost_resolver_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestRefusedClientsCountedAndLogged: a refused query is counted under the
// network holding its client, every network named starts at 0, and the log
// says so once per network per minute however many are refused.
func TestRefusedClientsCountedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	logs := &syncbuf.Buffer{}
	s, addr := newTestServer(t, testRoster(7), Config{Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if got := refusedCounts(t, reg); len(got) != 1 || got[UnknownNetwork] != 0 {
		t.Errorf("before any network is named: %v, want unknown at 0", got)
	}
	s.SetNetworks([]Network{
		{Name: "podman", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")}},
		{Name: "lo-net", Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	})
	if got := refusedCounts(t, reg); got["podman"] != 0 || got["lo-net"] != 0 || len(got) != 3 {
		t.Errorf("after SetNetworks: %v, want podman, lo-net and unknown at 0", got)
	}
	s.refuseLoopback.Store(true)
	for range 5 {
		r := unpack(t, exchangeRaw(t, addr, packQuery(t, "gitea.novox.internal.", dns.TypeA, false)))
		if r.Rcode != dns.RcodeRefused {
			t.Fatalf("rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
		}
	}
	if got := refusedCounts(t, reg); got["lo-net"] != 5 || got["podman"] != 0 || got[UnknownNetwork] != 0 {
		t.Errorf("after 5 refused from loopback: %v, want lo-net 5", got)
	}
	if n := strings.Count(logs.String(), "refused queries from a client outside the allowed networks"); n != 1 {
		t.Errorf("%d log lines for 5 refused queries within a minute, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "client=127.0.0.1 network=lo-net refused=1") {
		t.Errorf("the log line does not name the client and its network:\n%s", logs)
	}

	// The network goes: its count stays; its clients are unknown now.
	s.SetNetworks(nil)
	exchangeRaw(t, addr, packQuery(t, "gitea.novox.internal.", dns.TypeA, false))
	if got := refusedCounts(t, reg); got["lo-net"] != 5 || got[UnknownNetwork] != 1 {
		t.Errorf("after the network went: %v, want lo-net 5 (kept) and unknown 1", got)
	}
}
