package resolver

import (
	"net/netip"
	"testing"

	"codeberg.org/miekg/dns"
)

// FuzzHandle feeds the packet handler arbitrary packets: it must never
// panic, and whatever it answers must parse and answer that query.
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
	client := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, req []byte, tcp bool) {
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
	})
}
