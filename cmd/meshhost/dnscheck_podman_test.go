package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// TestDNSCheckOnPodman runs meshhost dns-check against containers on real
// podman, from their own network namespaces and resolv.conf:
//   - on a network whose gateway meshhost's resolver serves: REFUSED while
//     the network is not allowed (and the resolver counts and logs the
//     refused client under the network's name), then a mesh name answered
//     as the roster says, a zone name the roster lacks (NXDOMAIN inside the
//     zone), and a forwarded name whose upstream is dead;
//   - on an internal network, a nameserver it has no route to;
//   - on a third network, a gateway that takes the question and never
//     answers (timeout), then one where nothing listens.
//
// Every query goes to the test's own networks' gateways, or nowhere.
func TestDNSCheckOnPodman(t *testing.T) {
	h := podmantest.New(t)
	// Three distinct subnets 10.215.x.0/24 from one random byte: x, x+1,
	// x+2 (mod 256), so two runs on one machine rarely meet and one run's
	// never collide.
	var b [1]byte
	rand.Read(b[:])
	subnet := func(i int) (netip.Prefix, netip.Addr) {
		x := b[0] + byte(i)
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 215, x, 0}), 24), netip.AddrFrom4([4]byte{10, 215, x, 1})
	}
	subA, gwA := subnet(0)
	subB, gwB := subnet(1)
	subC, gwC := subnet(2)
	netA := h.Network("dnsa", "--disable-dns", "--subnet", subA.String(), "--gateway", gwA.String())
	netB := h.Network("dnsb", "--internal", "--disable-dns", "--subnet", subB.String(), "--gateway", gwB.String())
	netC := h.Network("dnsc", "--disable-dns", "--subnet", subC.String(), "--gateway", gwC.String())

	// meshhost's resolver on netA's gateway, its roster saved where the
	// embedded resolver keeps it (dns-check --resolver embedded reads it
	// there); its upstream is a dead loopback port.
	state := t.TempDir()
	roster := &spec.Roster{Generation: 3, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"db.internal": {netip.MustParseAddr("10.1.2.3")}}}
	reg, logs := prometheus.NewRegistry(), &syncbuf.Buffer{}
	srv, err := resolver.New(resolver.Config{StatePath: statedir.New(state).Roster(), Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}, UpstreamTimeout: 300 * time.Millisecond,
		Forbidden: func(netip.AddrPort) error { return nil }}) // the test's own network, DNS disabled
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Update(roster); err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(netip.AddrPortFrom(gwA, 53)); err != nil {
		t.Fatalf("listening on %s:53: %v", gwA, err)
	}
	srv.SetNetworks([]resolver.Network{{Name: netA, Prefixes: []netip.Prefix{subA}}})

	start := func(name, network string, dns netip.Addr) string {
		t.Helper()
		h.MustPodman("run", "-d", "--name", h.Name(name), "--label", podmantest.Label+"="+h.Prefix(), "--network", network,
			"--dns", dns.String(), podmantest.Image, "sleep", "600")
		return h.Name(name)
	}
	a := start("a", netA, gwA)
	bc := start("b", netB, netip.MustParseAddr("192.0.2.53")) // TEST-NET-1: no route from an internal network
	c := start("c", netC, gwC)

	// check runs dns-check as text (its exit code and output) and as JSON.
	check := func(container, name string) (int, dnsCheckJSON, string) {
		t.Helper()
		cli := func(extra ...string) (int, string, string) {
			var stdout, stderr bytes.Buffer
			env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
			args := append([]string{"dns-check", container, name, "--podman", h.Socket(), "--state", state, "--resolver", "embedded", "--timeout", "1s"}, extra...)
			return run(context.Background(), env, args), stdout.String(), stderr.String()
		}
		code, text, errText := cli()
		_, js, jsErr := cli("--output", "json")
		var out dnsCheckJSON
		if err := json.Unmarshal([]byte(js), &out); err != nil {
			t.Fatalf("dns-check %s %s --output json: %v\n%s%s", container, name, err, js, jsErr)
		}
		return code, out, text + errText
	}
	verdict := func(out dnsCheckJSON) string {
		if len(out.Results) != 1 {
			return fmt.Sprintf("%d results", len(out.Results))
		}
		return string(out.Results[0].Verdict)
	}

	// Refused: netA is not allowed yet.
	code, out, text := check(a, "db.internal")
	if code != 3 || verdict(out) != "refused" || !strings.Contains(text, "REFUSED") || out.Results[0].Client == "" {
		t.Errorf("db.internal from %s, netA not allowed: exit %d, %+v\n%s", a, code, out.Results, text)
	}
	if got := refusedOf(t, reg, netA); got < 1 {
		t.Errorf("meshhost_resolver_refused_total{network=%q} = %v, want the refused client counted", netA, got)
	}
	if !strings.Contains(logs.String(), "network="+netA) {
		t.Errorf("the resolver did not log the refused client and its network:\n%s", logs)
	}

	srv.SetAllow([]netip.Prefix{subA})
	var js bytes.Buffer
	run(context.Background(), &environment{stdout: &js, stderr: &js, getenv: func(string) string { return "" }},
		[]string{"dns-check", a, "db.internal", "--podman", h.Socket(), "--state", state, "--resolver", "embedded", "--output", "json"})
	checkGolden(t, "dns-check.shape", jsonShape(t, js.String()))
	if code, out, text := check(a, "db.internal"); code != 0 || verdict(out) != "ok" || !out.Results[0].Meshhost || fmt.Sprint(out.Results[0].Answer) != "[10.1.2.3]" || out.Answered != gwA.String()+":53" {
		t.Errorf("db.internal from %s: exit %d, %+v answered %q\n%s", a, code, out.Results, out.Answered, text)
	}
	if _, out, text := check(a, "nope.internal"); verdict(out) != "nxdomain_in_zone" || !strings.Contains(text, "roster in force (generation 3) does not hold the name") {
		t.Errorf("nope.internal: %+v\n%s", out.Results, text)
	}
	if _, out, text := check(a, "example.org"); verdict(out) != "upstream_failed" || !out.Results[0].Meshhost {
		t.Errorf("example.org, the upstream dead: %+v\n%s", out.Results, text)
	}

	if code, out, text := check(bc, "db.internal"); code != 3 || verdict(out) != "no_route" {
		t.Errorf("from the internal network to 192.0.2.53: exit %d, %+v\n%s", code, out.Results, text)
	}

	// netC's gateway takes the question and never answers; then nothing
	// listens there.
	silent, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(gwC, 53)))
	if err != nil {
		t.Fatalf("binding %s:53: %v", gwC, err)
	}
	if _, out, text := check(c, "db.internal"); verdict(out) != "timeout" {
		t.Errorf("a silent gateway: %+v\n%s", out.Results, text)
	}
	silent.Close()
	if _, out, text := check(c, "db.internal"); verdict(out) != "no_listener" {
		t.Errorf("nothing on the gateway's port 53: %+v\n%s", out.Results, text)
	}
}

func refusedOf(t *testing.T, reg *prometheus.Registry, network string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshhost_resolver_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == network {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}
