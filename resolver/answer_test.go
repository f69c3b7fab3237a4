package resolver

import (
	"net/netip"
	"testing"

	"codeberg.org/miekg/dns"
)

// TestAnswer: Answer answers a roster name in-process, as a listener
// would, and for a name it would forward returns forwarded and sends
// nothing (no forward is counted).
func TestAnswer(t *testing.T) {
	s, err := New(safeConfig(t, Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(faultRoster(2)); err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	resp, fwd := s.Answer(packQuery(t, "n2.internal.", dns.TypeA, true), lo)
	if fwd || resp == nil {
		t.Fatalf("n2.internal: forwarded %v, reply %v", fwd, resp)
	}
	if got := answers(unpack(t, resp)); len(got) != 1 {
		t.Errorf("n2.internal answers %v, want its one address", got)
	}
	resp, fwd = s.Answer(packQuery(t, "example.org.", dns.TypeA, true), lo)
	if !fwd || resp != nil {
		t.Fatalf("example.org: forwarded %v, reply %v; want forwarded and no reply", fwd, resp)
	}
	if n := s.inflight.Load(); n != 0 {
		t.Errorf("%d forwards in flight after a dry run", n)
	}
}
