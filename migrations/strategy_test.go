package migrations

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

// TestEndpoints: what each strategy asks of the resolver and gives the
// container, per kind of network, IPv6 included. The node-local address is
// 127.0.0.1 here (assigned to every host's lo), and ::1 for IPv6.
func TestEndpoints(t *testing.T) {
	a := netip.MustParseAddr
	v4 := func(third int) Subnet {
		return Subnet{Prefix: netip.MustParsePrefix(fmt.Sprintf("10.202.%d.0/24", third)), Gateway: a(fmt.Sprintf("10.202.%d.1", third))}
	}
	v6 := Subnet{Prefix: netip.MustParsePrefix("fd53:1::/64"), Gateway: a("fd53:1::1")}
	dual := Network{Name: "dual", Driver: "bridge", Subnets: []Subnet{v6, v4(1)}}
	v6only := Network{Name: "v6", Driver: "bridge", Subnets: []Subnet{v6}}
	v6dns := Network{Name: "v6dns", Driver: "bridge", DNSEnabled: true, Subnets: []Subnet{v6}}
	dualDNS := Network{Name: "dualdns", Driver: "bridge", DNSEnabled: true, Subnets: []Subnet{v4(2), v6}}
	ndots := []string{"ndots:1"}
	for _, tc := range []struct {
		name      string
		n         Network
		s         Strategy
		nodeLocal string
		want      endpoint
		wantErr   string
	}{
		{name: "gateway, dual stack: IPv4 only", n: dual, s: StrategyGateway, want: endpoint{
			listen: []netip.AddrPort{netip.MustParseAddrPort("10.202.1.1:53")},
			dns:    spec.DNSConfig{Servers: []netip.Addr{a("10.202.1.1")}, Options: ndots}}},
		{name: "gateway, IPv6 only", n: v6only, s: StrategyGateway, want: endpoint{
			listen: []netip.AddrPort{netip.MustParseAddrPort("[fd53:1::1]:53")},
			dns:    spec.DNSConfig{Servers: []netip.Addr{a("fd53:1::1")}, Options: ndots}}},
		{name: "gateway, no gateway", n: Network{Name: "x", Subnets: []Subnet{{Prefix: v6.Prefix}}}, s: StrategyGateway, wantErr: "no gateway"},
		{name: "gateway, DNS-enabled", n: dualDNS, s: StrategyGateway, wantErr: "aardvark-dns serves"},
		{name: "node-local, IPv4 address, IPv6-only network", n: v6only, s: StrategyNodeLocal, nodeLocal: "127.0.0.1",
			wantErr: "no IPv4 subnet, so its containers have no route to the node-local address 127.0.0.1"},
		{name: "node-local, IPv6 address, IPv6-only network", n: v6only, s: StrategyNodeLocal, nodeLocal: "::1", want: endpoint{
			listen: []netip.AddrPort{netip.MustParseAddrPort("[::1]:53")},
			allow:  []netip.Prefix{netip.MustParsePrefix("::1/128")},
			dns:    spec.DNSConfig{Servers: []netip.Addr{a("::1")}, Options: ndots}}},
		// Through aardvark-dns the host asks the node-local address, so
		// the network's family does not matter; the probe decides.
		{name: "node-local, IPv6-only DNS-enabled network", n: v6dns, s: StrategyNodeLocal, nodeLocal: "127.0.0.1", want: endpoint{
			listen:   []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")},
			allow:    []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
			forwards: []localForward{{netip.MustParsePrefix("fd53:1::/64"), netip.MustParseAddrPort("[fd53:1::1]:53")}},
			dns:      spec.DNSConfig{Servers: []netip.Addr{a("127.0.0.1")}, Search: []string{PodmanDNSZone}, Options: ndots}}},
		{name: "node-local, not assigned", n: dual, s: StrategyNodeLocal, nodeLocal: "192.0.2.53", wantErr: "not assigned to this host"},
		{name: "aardvark, dual stack", n: dualDNS, s: StrategyAardvark, want: endpoint{
			listen: []netip.AddrPort{netip.MustParseAddrPort(DefaultLoopback + ":53")},
			dns:    spec.DNSConfig{Servers: []netip.Addr{a(DefaultLoopback)}, Search: []string{PodmanDNSZone}, Options: ndots}}},
		{name: "aardvark, IPv6 only", n: v6dns, s: StrategyAardvark, want: endpoint{
			listen: []netip.AddrPort{netip.MustParseAddrPort(DefaultLoopback + ":53")},
			dns:    spec.DNSConfig{Servers: []netip.Addr{a(DefaultLoopback)}, Search: []string{PodmanDNSZone}, Options: ndots}}},
		{name: "aardvark, no aardvark", n: dual, s: StrategyAardvark, wantErr: "no aardvark-dns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ExposerConfig{Resolver: newFakeResolver()}
			if tc.nodeLocal != "" {
				cfg.NodeLocal = a(tc.nodeLocal)
			}
			e, err := NewExposer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.endpoint(tc.n, tc.s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("endpoint(%s, %s) = %+v, %v; want an error saying %q", tc.n.Name, tc.s, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("endpoint(%s, %s): %v", tc.n.Name, tc.s, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(endpoint{}, localForward{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("endpoint(%s, %s) (-want +got):\n%s", tc.n.Name, tc.s, diff)
			}
		})
	}
}

// TestLoopbackMustBeLoopback: aardvark-dns forwards from the host to the
// Loopback address; anything else would send queries off the machine.
func TestLoopbackMustBeLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1": true, "127.53.0.9": true, "::1": true, "10.0.0.1": false, "169.254.53.53": false} {
		_, err := NewExposer(ExposerConfig{Resolver: newFakeResolver(), Loopback: netip.MustParseAddr(addr)})
		if (err == nil) != ok {
			t.Errorf("NewExposer(Loopback %s) = %v, want ok %v", addr, err, ok)
		}
	}
}

// TestCandidatesOnDNSEnabledBridge: the aardvark strategy first (it needs
// nothing on lo), the node-local one after.
func TestCandidatesOnDNSEnabledBridge(t *testing.T) {
	if got, want := candidates(KindBridgeDNS), []Strategy{StrategyAardvark, StrategyNodeLocal}; !cmp.Equal(got, want) {
		t.Errorf("candidates(%s) = %v, want %v", KindBridgeDNS, got, want)
	}
	for _, k := range []Kind{KindBridge, KindInternal, KindHost, KindInternalDNS} {
		for _, s := range candidates(k) {
			if s == StrategyAardvark {
				t.Errorf("candidates(%s) has %s, but no aardvark-dns forwards there", k, s)
			}
		}
	}
}

// TestDiagnose: a failed probe says what the runtime did that the strategy
// cannot live with, read from what the probe container saw.
func TestDiagnose(t *testing.T) {
	lo := spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr(DefaultLoopback)}}
	nl := spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("169.254.53.53")}}
	for _, tc := range []struct {
		name string
		s    Strategy
		dns  spec.DNSConfig
		out  probeOutput
		want string
	}{
		{"podman 4.3 writes the loopback server", StrategyAardvark, lo,
			probeOutput{ResolvConf: "search dns.podman\nnameserver " + DefaultLoopback + "\noptions ndots:1\n", Addrs: []string{"10.89.0.5"}},
			"the runtime wrote the DNS server " + DefaultLoopback + " into the container's resolv.conf instead of keeping aardvark-dns as its nameserver, as podman before 4.4 does: the container asks its own loopback"},
		{"podman 5 keeps aardvark", StrategyAardvark, lo,
			probeOutput{ResolvConf: "search dns.podman\nnameserver 10.89.0.1\n", Addrs: []string{"10.89.0.5"}}, ""},
		{"an IPv6-only container given an IPv4 server", StrategyNodeLocal, nl,
			probeOutput{ResolvConf: "nameserver 169.254.53.53\n", Addrs: []string{"fd53:1::5", "fe80::1"}},
			"the container has no IPv4 address to reach its nameserver 169.254.53.53"},
		{"dual stack", StrategyNodeLocal, nl,
			probeOutput{ResolvConf: "nameserver 169.254.53.53\n", Addrs: []string{"fd53:1::5", "10.89.0.5"}}, ""},
	} {
		if got := diagnose(tc.s, tc.dns, tc.out); got != tc.want {
			t.Errorf("%s: diagnose = %q, want %q", tc.name, got, tc.want)
		}
	}
}
