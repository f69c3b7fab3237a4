// Package dnsstub is a one-name DNS server on loopback: it answers A for
// one name with one address and NXDOMAIN for anything else. `meshhost probe`
// and the tests use it as the resolver's upstream, so proving that
// forwarding works never sends a query off the machine.
package dnsstub

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"
)

// Start serves on a free UDP port of 127.0.0.1 until ctx ends, and returns
// its address. name is a fully qualified or relative domain name.
func Start(ctx context.Context, name string, addr netip.Addr) (netip.AddrPort, error) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("starting the stub upstream: %w", err)
	}
	context.AfterFunc(ctx, func() { pc.Close() })
	fqdn := strings.ToLower(strings.TrimSuffix(name, ".") + ".")
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := answer(buf[:n], fqdn, addr); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort(), nil
}

// answer returns the wire reply to the query q, or nil to drop it.
func answer(q []byte, name string, addr netip.Addr) []byte {
	m := &dns.Msg{Data: append([]byte(nil), q...)}
	if m.Unpack() != nil || m.Response || len(m.Question) != 1 {
		return nil
	}
	qh := m.Question[0].Header()
	r := &dns.Msg{}
	r.ID, r.Opcode, r.Response, r.Authoritative = m.ID, m.Opcode, true, true
	r.RecursionDesired, r.RecursionAvailable = m.RecursionDesired, true
	r.Question = m.Question
	switch {
	case strings.ToLower(qh.Name) != name:
		r.Rcode = dns.RcodeNameError
	case dns.RRToType(m.Question[0]) == dns.TypeA:
		r.Answer = []dns.RR{&dns.A{Hdr: dns.Header{Name: qh.Name, Class: dns.ClassINET, TTL: 30}, A: rdata.A{Addr: addr}}}
	}
	if r.Pack() != nil {
		return nil
	}
	return r.Data
}
