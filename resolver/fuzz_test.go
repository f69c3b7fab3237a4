package resolver

import (
	"net"
	"net/netip"
	"testing"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"

	"github.com/meshhost/meshhost/spec"
)

// FuzzHandle feeds the packet handler arbitrary packets, of a server
// answering from a compiled table and of one answering from a view (an
// overlay of changed names): it must never panic, and whatever it answers
// must parse and answer that query.
func FuzzHandle(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
		edns  bool
	}{
		{"gitea.novox.internal.", dns.TypeA, false},
		{"GITEA.novox.internal.", dns.TypeAAAA, true},
		{"nope.novox.internal.", dns.TypeA, true},
		{"x.meshhost-probe.internal.", dns.TypeA, false},
		{"7.0.89.10.in-addr.arpa.", dns.TypePTR, false},
		{"internal.", dns.TypeSOA, true},
		{"internal.", dns.TypeAXFR, false},
		{"example.com.", dns.TypeANY, false},
		{"many.novox.internal.", dns.TypeA, false},
	} {
		f.Add(packQuery(f, q.name, q.qtype, q.edns), false)
	}
	for _, n := range []string{"deep.new.novox.internal.", "new.novox.internal.", "v6only.novox.internal.", "9.0.89.10.in-addr.arpa."} {
		f.Add(packQuery(f, n, dns.TypeA, true), false)
	}
	f.Add([]byte{}, true)
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12, 0, 1, 0, 1}, false)
	f.Add([]byte{0, 1, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true)

	s, err := New(safeConfig(f, Config{}))
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(testRoster(7)); err != nil {
		f.Fatal(err)
	}
	// A second server answers from a view: the same roster changed by a
	// delta, the names changed held in an overlay.
	v, err := New(safeConfig(f, Config{}))
	if err != nil {
		f.Fatal(err)
	}
	defer v.Close()
	if err := v.Update(testRoster(7)); err != nil {
		f.Fatal(err)
	}
	if err := v.Apply(&spec.RosterDelta{From: 7, To: 8,
		Set:    map[string][]netip.Addr{"deep.new.novox.internal": {netip.MustParseAddr("10.89.0.9")}, "gitea.novox.internal": {netip.MustParseAddr("fd7a::7")}},
		Remove: []string{"v6only.novox.internal"}}); err != nil {
		f.Fatal(err)
	}
	if v.table.Load().over == nil {
		f.Fatal("the delta left no overlay")
	}
	client := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, req []byte, tcp bool) {
		for _, s := range []*Server{s, v} {
			checkHandle(t, s, client, req, tcp)
		}
	})
}

// checkHandle asks s req and checks the reply answers it, fits, and parses.
func checkHandle(t *testing.T, s *Server, client netip.Addr, req []byte, tcp bool) {
	{
		var sc scratch
		buf := make([]byte, 4096)
		resp := s.handle(req, client, !tcp, &sc, buf, replyTo{})
		if resp == nil {
			return
		}
		if len(req) < headerLen {
			t.Fatalf("answered a %d-byte packet", len(req))
		}
		if resp[0] != req[0] || resp[1] != req[1] || resp[2]&0x80 == 0 {
			t.Fatalf("reply %x does not answer %x (ID or QR)", resp[:4], req[:4])
		}
		if !tcp && len(resp) > 512 && (len(resp) > 1232) {
			m := &dns.Msg{Data: req}
			if m.Unpack() == nil && len(resp) > max(512, int(m.UDPSize)) {
				t.Fatalf("UDP reply of %d bytes exceeds the client's size %d", len(resp), m.UDPSize)
			}
		}
		m := &dns.Msg{Data: append([]byte(nil), resp...)}
		if err := m.Unpack(); err != nil {
			t.Fatalf("reply does not parse: %v\nquery %x\nreply %x", err, req, resp)
		}
	}
}

// FuzzHandleForward is FuzzHandle with a loopback upstream and the cache
// on: questions outside the roster are forwarded (their answers go
// nowhere), and once an answer is cached the same question is answered
// from the cache, which must then answer that query and parse.
func FuzzHandleForward(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
		edns  bool
	}{
		{"example.com.", dns.TypeA, false},
		{"Example.COM.", dns.TypeA, true},
		{"example.com.", dns.TypeAAAA, true},
		{"99.2.0.192.in-addr.arpa.", dns.TypePTR, false},
		{"gitea.novox.internal.", dns.TypeA, false},
	} {
		f.Add(packQuery(f, q.name, q.qtype, q.edns), false)
	}
	// The upstream answers every question with one A record.
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			q := &dns.Msg{Data: append([]byte(nil), buf[:n]...)}
			if q.Unpack() != nil || len(q.Question) != 1 {
				continue
			}
			r := new(dns.Msg)
			r.ID, r.Response, r.Opcode, r.Question = q.ID, true, q.Opcode, q.Question
			r.Answer = []dns.RR{&dns.A{Hdr: dns.Header{Name: q.Question[0].Header().Name, Class: dns.ClassINET, TTL: 300},
				A: rdata.A{Addr: netip.MustParseAddr("192.0.2.10")}}}
			if r.Pack() == nil {
				pc.WriteToUDPAddrPort(r.Data, from)
			}
		}
	}()
	s, err := New(safeConfig(f, Config{Upstreams: []netip.AddrPort{pc.LocalAddr().(*net.UDPAddr).AddrPort()}}))
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(testRoster(7)); err != nil {
		f.Fatal(err)
	}
	client := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, req []byte, tcp bool) {
		var sc scratch
		buf := make([]byte, 4096)
		for range 2 { // the second time, maybe from the cache
			resp := s.handle(req, client, !tcp, &sc, buf, replyTo{})
			if resp == nil {
				continue
			}
			if resp[0] != req[0] || resp[1] != req[1] || resp[2]&0x80 == 0 {
				t.Fatalf("reply %x does not answer %x (ID or QR)", resp[:4], req[:4])
			}
			if err := (&dns.Msg{Data: append([]byte(nil), resp...)}).Unpack(); err != nil {
				t.Fatalf("reply does not parse: %v\nquery %x\nreply %x", err, req, resp)
			}
		}
	})
}
