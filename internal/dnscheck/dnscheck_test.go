package dnscheck

import (
	"context"
	"fmt"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// refuser answers every question on addr with REFUSED until the test ends.
func refuser(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			m := &dns.Msg{Data: append([]byte(nil), buf[:n]...)}
			if m.Unpack() != nil {
				continue
			}
			r := &dns.Msg{}
			r.ID, r.Response, r.Rcode, r.Question = m.ID, true, dns.RcodeRefused, m.Question
			if r.Pack() == nil {
				pc.WriteToUDPAddrPort(r.Data, from)
			}
		}
	}()
}

// TestCheck asks four loopback servers from this process's own network
// namespace: meshhost's resolver (whose upstream is dead), an address where
// nothing listens, one that never answers, and one that refuses; and
// judges a mesh name, a name inside the zone the roster lacks, a name
// outside the mesh, and a mesh name the resolver serves another address
// for.
func TestCheck(t *testing.T) {
	needs.Root(t, "joining a network namespace")
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(probe.LocalAddr().(*net.UDPAddr).Port)
	probe.Close()
	at := func(last byte) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, last}), port)
	}

	roster := &spec.Roster{Generation: 4, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"db.internal": {netip.MustParseAddr("10.0.0.1")}}}
	srv, err := resolver.New(resolver.Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}, UpstreamTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Update(roster); err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(at(1)); err != nil {
		t.Fatal(err)
	}
	silent, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(at(3)))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	refuser(t, at(4))
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(conf, []byte("search internal\nnameserver 127.0.0.1\nnameserver 127.0.0.2\nnameserver 127.0.0.3\nnameserver 127.0.0.4\noptions ndots:1\n"), 0o644)

	check := func(name string, r *spec.Roster) *Report {
		t.Helper()
		rep, err := Check(context.Background(), Config{Netns: "/proc/self/ns/net", ResolvConf: conf, Name: name, Roster: r, Timeout: 500 * time.Millisecond, Port: port})
		if err != nil {
			t.Fatalf("Check(%s): %v", name, err)
		}
		return rep
	}
	verdicts := func(rep *Report) string {
		s := ""
		for _, r := range rep.Results {
			s += fmt.Sprintf("%s meshhost=%v; ", r.Verdict, r.Meshhost)
		}
		return s
	}

	rep := check("db.internal", roster)
	if got, want := verdicts(rep), "ok meshhost=true; no_listener meshhost=false; timeout meshhost=false; refused meshhost=false; "; got != want {
		t.Errorf("db.internal: %s\nwant %s", got, want)
	}
	if rep.Kind != "mesh" || len(rep.Results[0].Answer) != 1 || rep.Results[0].Answer[0] != netip.MustParseAddr("10.0.0.1") || rep.Results[0].Client != "127.0.0.1" {
		t.Errorf("db.internal: %+v", rep)
	}
	if rep.Answered != at(1).String() && rep.Answered != at(4).String() {
		t.Errorf("answered first: %q, want the resolver or the refuser", rep.Answered)
	}
	if len(rep.Search) != 1 || rep.Options[0] != "ndots:1" {
		t.Errorf("resolv.conf read as %v %v", rep.Search, rep.Options)
	}
	if got := check("nope.internal", roster).Results[0]; got.Verdict != NXDomainInZone {
		t.Errorf("nope.internal from the resolver: %+v, want nxdomain_in_zone", got)
	}
	if got := check("example.org", roster).Results[0]; got.Verdict != UpstreamFailed {
		t.Errorf("example.org from the resolver (upstream dead): %+v, want upstream_failed", got)
	}
	moved := &spec.Roster{Generation: 5, Zones: []string{"internal"}, Names: map[string][]netip.Addr{"db.internal": {netip.MustParseAddr("10.0.0.2")}}}
	if got := check("db.internal", moved).Results[0]; got.Verdict != Stale {
		t.Errorf("db.internal with roster 5 in force, the resolver serving 4: %+v, want stale", got)
	}
}
