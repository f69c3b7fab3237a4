package sim

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"codeberg.org/miekg/dns"
)

// client is the address the simulation asks the resolver from: loopback,
// which it answers without an allow list.
var client = netip.MustParseAddr("127.0.0.1")

// namesNeverForwarded: every name of the roster the resolver serves is
// answered by the resolver itself, never from an upstream: authoritative,
// with exactly the roster's addresses of the type asked, and a name
// absent from a zone of it is NXDOMAIN, also not forwarded. The resolver
// is asked in-process (resolver.Server.Answer: no socket, nothing sent).
func namesNeverForwarded(w *world) error {
	r := w.m.srv.Roster()
	if r == nil {
		return nil
	}
	for name, addrs := range r.Names {
		qtype, want := dns.TypeA, []netip.Addr{}
		for _, a := range addrs {
			if a.Is4() {
				want = append(want, a)
			}
		}
		if len(want) == 0 {
			qtype = dns.TypeAAAA
			want = addrs
		}
		m, err := ask(w, name, qtype)
		if err != nil {
			return err
		}
		if m.Rcode != dns.RcodeSuccess || !m.Authoritative {
			return fmt.Errorf("roster %d's name %s: rcode %s, authoritative %v", r.Generation, name, dns.RcodeToString[m.Rcode], m.Authoritative)
		}
		var got []netip.Addr
		for _, rr := range m.Answer {
			switch rr := rr.(type) {
			case *dns.A:
				got = append(got, rr.A.Addr)
			case *dns.AAAA:
				got = append(got, rr.AAAA.Addr)
			}
		}
		slices.SortFunc(got, netip.Addr.Compare)
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			return fmt.Errorf("roster %d's name %s answers %v, the roster has %v", r.Generation, name, got, want)
		}
	}
	for _, z := range r.Zones {
		name := "absent-from-the-roster." + z
		if _, ok := r.Names[name]; ok {
			continue
		}
		m, err := ask(w, name, dns.TypeA)
		if err != nil {
			return err
		}
		if m.Rcode != dns.RcodeNameError {
			return fmt.Errorf("roster %d: %s, in its zone %s and not a name of it, answers %s", r.Generation, name, z, dns.RcodeToString[m.Rcode])
		}
	}
	return nil
}

// ask asks the resolver for name and type in-process, and fails when it
// would forward the question or gives no reply.
func ask(w *world, name string, qtype uint16) (*dns.Msg, error) {
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	q := dns.NewMsg(name, qtype)
	if q == nil {
		return nil, fmt.Errorf("no query for %q", name)
	}
	q.ID, q.RecursionDesired, q.UDPSize = 0x5157, true, 1232
	if err := q.Pack(); err != nil {
		return nil, err
	}
	resp, forwarded := w.m.srv.Answer(q.Data, client)
	if forwarded {
		return nil, fmt.Errorf("the name %s (%s), of the roster served or in its zone, is forwarded upstream", name, dns.TypeToString[qtype])
	}
	if resp == nil {
		return nil, fmt.Errorf("the name %s (%s): no reply", name, dns.TypeToString[qtype])
	}
	m := &dns.Msg{Data: resp}
	if err := m.Unpack(); err != nil {
		return nil, fmt.Errorf("the name %s: the reply does not parse: %w", name, err)
	}
	return m, nil
}
