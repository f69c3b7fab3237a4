// Package dnscheck asks a container's nameservers for a name the way the
// container itself does: from inside its network namespace, to the servers
// its resolv.conf lists. It says which server answered, what, and when a
// server failed, why: refused by the resolver's allow list, no route, no
// listener, a timeout, a name the roster does not hold inside a mesh zone,
// or a forwarded question that failed upstream (`meshhost dns-check`).
package dnscheck

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/plumbing/netns"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// Verdict classifies one server's answer.
type Verdict string

const (
	OK Verdict = "ok" // answered the name, as the roster says when it is a mesh name
	// Stale: a mesh name answered with other addresses than the roster in
	// force holds (another resolver, or an older roster).
	Stale Verdict = "stale"
	// Refused: REFUSED; meshhost's resolver refuses clients outside its
	// allow list (loopback, --allow, networks proven by the probe).
	Refused Verdict = "refused"
	// NoRoute: the container has no route to the server.
	NoRoute Verdict = "no_route"
	// NoListener: the server's host answered "port unreachable": nothing
	// listens there on port 53.
	NoListener Verdict = "no_listener"
	// Timeout: no answer in time (dropped by a firewall, or a stuck server).
	Timeout Verdict = "timeout"
	// NXDomainInZone: NXDOMAIN for a name inside a mesh zone: the roster in
	// force does not hold it (meshhost's resolver never forwards those).
	NXDomainInZone Verdict = "nxdomain_in_zone"
	// NXDomain: NXDOMAIN for a name outside the mesh's zones, from upstream.
	NXDomain Verdict = "nxdomain"
	// UpstreamFailed: SERVFAIL for a name outside the roster: the question
	// was forwarded and the resolver's upstreams failed it.
	UpstreamFailed Verdict = "upstream_failed"
	// NoData: the name exists without an address of the type asked.
	NoData Verdict = "nodata"
	// Failed: anything else (another rcode, a malformed reply).
	Failed Verdict = "failed"
)

// Config is one check.
type Config struct {
	// Netns is the container's network namespace (/proc/PID/ns/net).
	Netns string
	// ResolvConf is the container's resolv.conf
	// (/proc/PID/root/etc/resolv.conf).
	ResolvConf string
	// Name is asked for as it is written (a fully qualified name; the
	// search list is not applied).
	Name string
	// Roster is the roster in force on the machine (nil: unknown): it says
	// whether Name is a mesh name, inside a zone, or outside, and what a
	// mesh name's addresses are.
	Roster *spec.Roster
	// Timeout bounds the wait for each server. Default 2s, as glibc's.
	Timeout time.Duration
	// Port is the nameservers' port: 53 (resolv.conf cannot say another)
	// unless a test sets one.
	Port uint16
}

// Report is what a check found.
type Report struct {
	Name string `json:"name"`
	// Kind is what the roster in force says of Name: "mesh" (a roster
	// name), "zone" (inside a mesh zone, not in the roster), "outside" or
	// "unknown" (no roster).
	Kind             string       `json:"kind"`
	Zone             string       `json:"zone,omitempty"`
	RosterGeneration uint64       `json:"roster_generation,omitempty"`
	RosterAddrs      []netip.Addr `json:"roster_addrs,omitempty"`
	// Nameservers, Search and Options are the container's resolv.conf.
	Nameservers []netip.Addr `json:"nameservers"`
	Search      []string     `json:"search,omitempty"`
	Options     []string     `json:"options,omitempty"`
	// Results has one entry per nameserver, in resolv.conf's order.
	Results []Result `json:"results"`
	// Answered is the server whose answer came first: musl takes it
	// whatever it says (NXDOMAIN included); glibc asks in order and moves
	// on only on a timeout or failure. Empty when none answered.
	Answered string `json:"answered,omitempty"`
}

// Result is one server's answer to the name.
type Result struct {
	Server string `json:"server"`
	// Client is the container's address the question left from.
	Client string `json:"client,omitempty"`
	// Meshhost: the server answered meshhost's canary (an address in
	// 240.0.0.0/4 for <nonce>.meshhost-probe.<zone>): it is a meshhost
	// resolver. False when it did not, or could not be asked.
	Meshhost       bool         `json:"meshhost"`
	Verdict        Verdict      `json:"verdict"`
	Rcode          string       `json:"rcode,omitempty"`
	Answer         []netip.Addr `json:"answer,omitempty"`
	LatencySeconds float64      `json:"latency_seconds"`
	// Why says what the verdict means here, and what to look at.
	Why string `json:"why"`
	at  time.Time
}

// Check asks every nameserver of the container's resolv.conf for
// cfg.Name, from inside the container's network namespace.
func Check(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Port == 0 {
		cfg.Port = 53
	}
	conf, err := os.ReadFile(cfg.ResolvConf)
	if err != nil {
		return nil, fmt.Errorf("reading the container's resolv.conf: %w", err)
	}
	rep := &Report{Name: spec.CanonicalName(cfg.Name), Kind: "unknown"}
	rep.Nameservers, rep.Search, rep.Options = parseResolvConf(conf)
	if len(rep.Nameservers) == 0 {
		return nil, fmt.Errorf("the container's resolv.conf (%s) lists no nameserver", cfg.ResolvConf)
	}
	classify(rep, cfg.Roster)
	ns, err := netns.Join(cfg.Netns)
	if err != nil {
		return nil, fmt.Errorf("the container's network namespace (meshhost dns-check needs root): %w", err)
	}
	defer ns.Close()

	canary := ""
	if cfg.Roster != nil && len(cfg.Roster.Zones) > 0 {
		var b [6]byte
		rand.Read(b[:])
		canary = resolver.CanaryName("dnscheck-"+hex.EncodeToString(b[:]), cfg.Roster.Zones[0])
	}
	qtype := dns.TypeA
	if rep.Kind == "mesh" && !slices.ContainsFunc(rep.RosterAddrs, netip.Addr.Is4) {
		qtype = dns.TypeAAAA
	}
	results := make([]Result, len(rep.Nameservers))
	done := make(chan struct{}, len(rep.Nameservers))
	for i, server := range rep.Nameservers {
		go func() {
			defer func() { done <- struct{}{} }()
			results[i] = ask(ctx, ns, netip.AddrPortFrom(server, cfg.Port), rep, qtype, canary, cfg.Timeout)
		}()
	}
	for range rep.Nameservers {
		<-done
	}
	rep.Results = results
	var first *Result
	for i := range results {
		r := &results[i]
		if r.Rcode != "" && (first == nil || r.at.Before(first.at)) {
			first = r
		}
	}
	if first != nil {
		rep.Answered = first.Server
	}
	return rep, nil
}

// classify says what the roster in force makes of the name.
func classify(rep *Report, r *spec.Roster) {
	if r == nil {
		return
	}
	rep.RosterGeneration = r.Generation
	if addrs, ok := r.Names[rep.Name]; ok {
		rep.Kind, rep.RosterAddrs = "mesh", addrs
		return
	}
	rep.Kind = "outside"
	for _, z := range r.Zones {
		if rep.Name == z || strings.HasSuffix(rep.Name, "."+z) {
			rep.Kind, rep.Zone = "zone", z
			return
		}
	}
}

// ask asks server for the name (and the canary, to tell a meshhost
// resolver), and judges the answer.
func ask(ctx context.Context, ns *netns.NS, server netip.AddrPort, rep *Report, qtype uint16, canary string, timeout time.Duration) Result {
	res := Result{Server: server.String()}
	start := time.Now()
	reply, client, err := exchange(ctx, ns, server, rep.Name, qtype, timeout)
	res.LatencySeconds = time.Since(start).Seconds()
	res.at = time.Now()
	if client.IsValid() {
		res.Client = client.String()
	}
	if err != nil {
		res.Verdict, res.Why = transportVerdict(err, server, timeout)
		return res
	}
	res.Rcode = dns.RcodeToString[reply.Rcode]
	for _, rr := range reply.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			res.Answer = append(res.Answer, rr.Addr)
		case *dns.AAAA:
			res.Answer = append(res.Answer, rr.Addr)
		}
	}
	if canary != "" && reply.Rcode != dns.RcodeRefused {
		if c, _, err := exchange(ctx, ns, server, canary, dns.TypeA, timeout); err == nil && c.Rcode == dns.RcodeSuccess {
			for _, rr := range c.Answer {
				if a, ok := rr.(*dns.A); ok && netip.MustParsePrefix("240.0.0.0/4").Contains(a.Addr) {
					res.Meshhost = true
				}
			}
		}
	}
	judge(&res, reply.Rcode, rep)
	return res
}

// judge sets the verdict of an answer with rcode.
func judge(res *Result, rcode uint16, rep *Report) {
	who := "the server"
	if res.Meshhost {
		who = "meshhost's resolver"
	}
	switch rcode {
	case dns.RcodeRefused:
		res.Verdict = Refused
		res.Why = fmt.Sprintf("REFUSED: %s does not answer this container's address %s; meshhost's resolver answers only loopback, its --allow networks and the networks proven by the probe (see meshhost migrate status: is this container's network exposed?)", who, orUnknown(res.Client))
	case dns.RcodeNameError:
		switch rep.Kind {
		case "zone":
			res.Verdict = NXDomainInZone
			res.Why = fmt.Sprintf("NXDOMAIN inside the mesh zone %q: the roster in force (generation %d) does not hold the name; meshhost never forwards a zone's names (has the controller declared it?)", rep.Zone, rep.RosterGeneration)
		case "mesh":
			res.Verdict = Stale
			res.Why = fmt.Sprintf("NXDOMAIN, but the roster in force (generation %d) holds the name: %s is not serving that roster (another resolver, or an older roster)", rep.RosterGeneration, who)
		default:
			res.Verdict = NXDomain
			res.Why = "NXDOMAIN from upstream: the name is outside the mesh and does not exist there"
		}
	case dns.RcodeServerFailure:
		if rep.Kind == "mesh" || rep.Kind == "zone" {
			res.Verdict = Failed
			res.Why = fmt.Sprintf("SERVFAIL for a mesh name from %s (meshhost's resolver answers its zones itself)", who)
			return
		}
		res.Verdict = UpstreamFailed
		res.Why = fmt.Sprintf("SERVFAIL: %s forwarded the question and its upstreams failed it (check the agent's --upstream, or the host's resolv.conf)", who)
	case dns.RcodeSuccess:
		switch {
		case len(res.Answer) == 0:
			res.Verdict, res.Why = NoData, "the name exists without an address of the type asked"
		case rep.Kind == "mesh" && !sameAddrs(res.Answer, rep.RosterAddrs):
			res.Verdict = Stale
			res.Why = fmt.Sprintf("answered %v, but the roster in force (generation %d) says %v: %s is not serving that roster", res.Answer, rep.RosterGeneration, rep.RosterAddrs, who)
		case rep.Kind == "mesh":
			res.Verdict, res.Why = OK, fmt.Sprintf("answered as the roster in force (generation %d) says", rep.RosterGeneration)
		default:
			res.Verdict, res.Why = OK, "answered"
		}
	default:
		res.Verdict, res.Why = Failed, fmt.Sprintf("answered %s", dns.RcodeToString[rcode])
	}
}

// transportVerdict judges a question that got no DNS answer.
func transportVerdict(err error, server netip.AddrPort, timeout time.Duration) (Verdict, string) {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return NoRoute, fmt.Sprintf("no route from the container to %s: %v", server.Addr(), err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return NoListener, fmt.Sprintf("port unreachable: nothing listens on %s (is the resolver exposed on this network? meshhost migrate status)", server)
	case errors.As(err, &ne) && ne.Timeout():
		return Timeout, fmt.Sprintf("no answer within %s: a firewall drops the question, or the server is stuck", timeout)
	}
	return Failed, err.Error()
}

// exchange asks server for name from a fresh socket in the namespace, as a
// container's stub resolver does, and returns the reply and the address it
// left from.
func exchange(ctx context.Context, ns *netns.NS, server netip.AddrPort, name string, qtype uint16, timeout time.Duration) (*dns.Msg, netip.Addr, error) {
	var (
		c   *net.UDPConn
		err error
	)
	if doErr := ns.Do(ctx, func() {
		// A connected socket: the kernel picks the source address as the
		// container's routes say, and reports an ICMP port unreachable as
		// ECONNREFUSED.
		server := netip.AddrPortFrom(server.Addr().Unmap(), server.Port())
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
	}); doErr != nil {
		return nil, netip.Addr{}, doErr
	}
	if err != nil {
		return nil, netip.Addr{}, err
	}
	defer c.Close()
	client := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	m := dns.NewMsg(name, qtype)
	if err := m.Pack(); err != nil {
		return nil, client, err
	}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c.SetDeadline(deadline)
	if _, err := c.Write(m.Data); err != nil {
		return nil, client, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, client, err
		}
		r := &dns.Msg{Data: slices.Clone(buf[:n])}
		if err := r.Unpack(); err != nil || r.ID != m.ID {
			continue // not the reply
		}
		return r, client, nil
	}
}

// parseResolvConf returns the nameservers, search domains and options of a
// resolv.conf.
func parseResolvConf(data []byte) (servers []netip.Addr, search, options []string) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if a, err := netip.ParseAddr(f[1]); err == nil {
				servers = append(servers, a.Unmap())
			}
		case "search", "domain":
			search = f[1:]
		case "options":
			options = append(options, f[1:]...)
		}
	}
	return servers, search, options
}

func sameAddrs(a, b []netip.Addr) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
