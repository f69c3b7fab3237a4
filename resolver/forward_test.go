package resolver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// seenQuery is what a raw upstream saw of one query.
type seenQuery struct {
	id   uint16
	from netip.AddrPort
	name string
}

// rawUpstream is a loopback upstream that hands each query, as received,
// to answer, which writes whatever it likes back (or nothing).
type rawUpstream struct {
	addr netip.AddrPort
	conn *net.UDPConn
	mu   sync.Mutex // guards seen
	seen []seenQuery
}

func startRawUpstream(t *testing.T, answer func(u *rawUpstream, q *dns.Msg, from netip.AddrPort)) *rawUpstream {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{addr: c.LocalAddr().(*net.UDPAddr).AddrPort(), conn: c}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			q := &dns.Msg{Data: append([]byte(nil), buf[:n]...)}
			if q.Unpack() != nil || len(q.Question) != 1 {
				continue
			}
			u.mu.Lock()
			u.seen = append(u.seen, seenQuery{id: q.ID, from: from, name: strings.ToLower(q.Question[0].Header().Name)})
			u.mu.Unlock()
			answer(u, q, from)
		}
	}()
	return u
}

func (u *rawUpstream) queries() []seenQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// reply answers q with one A record of addr.
func reply(q *dns.Msg, addr string) []byte { return replyTTL(q, addr, 60) }

// replyTTL answers q with one A record of addr with that TTL.
func replyTTL(q *dns.Msg, addr string, ttl uint32) []byte {
	r := new(dns.Msg)
	r.ID, r.Response, r.RecursionAvailable, r.RecursionDesired = q.ID, true, true, q.RecursionDesired
	r.Question = q.Question
	r.Answer = []dns.RR{&dns.A{Hdr: dns.Header{Name: q.Question[0].Header().Name, Class: dns.ClassINET, TTL: ttl}, A: rdata.A{Addr: netip.MustParseAddr(addr)}}}
	if r.Pack() != nil {
		panic("packing a reply")
	}
	return r.Data
}

// answerA is a rawUpstream answer: 192.0.2.10 for every name.
func answerA(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
	u.conn.WriteToUDPAddrPort(reply(q, "192.0.2.10"), from)
}

// askA asks server for name's A record over UDP and returns the reply.
func askA(t *testing.T, server netip.AddrPort, name string) *dns.Msg {
	t.Helper()
	b := exchangeRaw(t, server, packQuery(t, name, dns.TypeA, false))
	if b == nil {
		t.Fatalf("%s: no reply", name)
	}
	return unpack(t, b)
}

// askAWithin is askA waiting up to d for the reply.
func askAWithin(t *testing.T, server netip.AddrPort, name string, d time.Duration) *dns.Msg {
	t.Helper()
	c, err := net.Dial("udp", server.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write(packQuery(t, name, dns.TypeA, false)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("%s: no reply within %v: %v", name, d, err)
	}
	return unpack(t, buf[:n])
}

func firstA(m *dns.Msg) string {
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.Addr.String()
		}
	}
	return ""
}

// TestForwardRandomIDsAndPorts: every upstream query has a fresh random ID
// (not the client's), and the source ports are many, spread over the
// ephemeral range (the kernel's random choice), and change as sockets
// rotate; never the listener's port, never one fixed port.
func TestForwardRandomIDsAndPorts(t *testing.T) {
	up := startRawUpstream(t, answerA)
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, CacheSize: -1})
	s.fwd.uses.Store(16)
	const n = 400
	for i := range n {
		if m := askA(t, addr, fmt.Sprintf("n%d.example.com.", i)); firstA(m) != "192.0.2.10" {
			t.Fatalf("n%d.example.com: %v", i, m)
		}
	}
	seen := up.queries()
	if len(seen) != n {
		t.Fatalf("upstream saw %d queries, want %d", len(seen), n)
	}
	ids := map[uint16]bool{}
	ports := map[uint16]bool{}
	clientID := 0
	for _, q := range seen {
		ids[q.id] = true
		ports[q.from.Port()] = true
		if q.id == 0x1234 { // packQuery's ID
			clientID++
		}
		if q.from.Port() == addr.Port() {
			t.Errorf("a query left from the listener's port %d", addr.Port())
		}
	}
	// 400 random 16-bit IDs collide about once; a counter or the client's
	// ID would not pass.
	if len(ids) < n-10 || clientID > 2 {
		t.Errorf("%d distinct IDs in %d queries, %d with the client's ID; want random ones", len(ids), n, clientID)
	}
	// Rotated every 16 uses: at least n/16 sockets, each on its own port.
	if len(ports) < n/16 {
		t.Errorf("%d source ports for %d queries at 16 uses per socket, want at least %d", len(ports), n, n/16)
	}
	ps := slices.Sorted(func(yield func(uint16) bool) {
		for p := range ports {
			if !yield(p) {
				return
			}
		}
	})
	if spread := int(ps[len(ps)-1]) - int(ps[0]); spread < 50*len(ps) {
		t.Errorf("source ports %v span only %d: predictable", ps, spread)
	}
	// Between rotations, at most udpSockets ports are in use at once.
	window := map[uint16]bool{}
	for _, q := range seen[:16] {
		window[q.from.Port()] = true
	}
	if len(window) > udpSockets {
		t.Errorf("%d ports in the first 16 queries, want at most %d sockets per upstream", len(window), udpSockets)
	}
}

// TestForwardSpoofedReplies injects forged replies ahead of the real one:
// with another ID, another question, not a response, and the right ID and
// question from another port and from another address. Only the real reply
// is taken, and only it is cached.
func TestForwardSpoofedReplies(t *testing.T) {
	spoofPort, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer spoofPort.Close()
	var spoofAddr atomic.Pointer[net.UDPConn] // 127.0.0.2, the upstream's port: bound below
	up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
		evil := func(mod func(r *dns.Msg)) []byte {
			r := &dns.Msg{Data: reply(q, "6.6.6.6")}
			r.Unpack()
			mod(r)
			r.Data = nil
			r.Pack()
			return r.Data
		}
		u.conn.WriteToUDPAddrPort(evil(func(r *dns.Msg) { r.ID ^= 0x5A5A }), from)
		u.conn.WriteToUDPAddrPort(evil(func(r *dns.Msg) {
			other := "victim.example.com."
			if strings.EqualFold(q.Question[0].Header().Name, other) {
				other = "evil.example.org."
			}
			r.Question = []dns.RR{&dns.A{Hdr: dns.Header{Name: other, Class: dns.ClassINET}}}
			r.Answer[0].Header().Name = other
		}), from)
		u.conn.WriteToUDPAddrPort(evil(func(r *dns.Msg) { r.Response = false }), from)
		spoofPort.WriteToUDPAddrPort(evil(func(*dns.Msg) {}), from)
		if c := spoofAddr.Load(); c != nil {
			c.WriteToUDPAddrPort(evil(func(*dns.Msg) {}), from)
		}
		time.Sleep(20 * time.Millisecond) // the forgeries arrive first
		u.conn.WriteToUDPAddrPort(reply(q, "192.0.2.10"), from)
	})
	sa, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), up.addr.Port())))
	if err != nil {
		t.Fatalf("binding 127.0.0.2 with the upstream's port: %v", err)
	}
	defer sa.Close()
	spoofAddr.Store(sa)

	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, UpstreamTimeout: 5 * time.Second})
	for i := range 3 {
		m := askA(t, addr, "www.example.com.")
		if got := firstA(m); got != "192.0.2.10" || len(m.Answer) != 1 {
			t.Fatalf("query %d: answer %v, want only the real 192.0.2.10", i, m.Answer)
		}
	}
	if n := len(up.queries()); n != 1 {
		t.Errorf("upstream asked %d times, want 1 (then the cache)", n)
	}
	if got := firstA(askA(t, addr, "victim.example.com.")); got != "192.0.2.10" {
		t.Errorf("victim.example.com: %s, want the real 192.0.2.10 (a forged answer for it came with another question)", got)
	}
	checkCacheHoldsNoMeshName(t, s)
}

// checkCacheHoldsNoMeshName fails when an entry of s's cache is for a
// name of the roster being served or in one of its zones, or depends on
// one (its records' owners, its CNAME targets).
func checkCacheHoldsNoMeshName(t *testing.T, s *Server) {
	t.Helper()
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	for _, e := range s.cache.lru.Values() {
		for name := range e.names() {
			if s.isMeshName(name) {
				t.Errorf("the cache's entry for %q depends on mesh name %q", e.name(), name)
			}
		}
	}
}

// TestForwardNeverMixedIntoMesh: an upstream answering with records of mesh
// names (a CNAME into the zone and a forged A for a mesh name) changes no
// mesh answer; a cached outside name that the roster later takes is
// answered from the roster; other cached names survive the swap.
func TestForwardNeverMixedIntoMesh(t *testing.T) {
	up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
		name := q.Question[0].Header().Name
		if strings.HasPrefix(strings.ToLower(name), "sneaky.") {
			r := new(dns.Msg)
			r.ID, r.Response, r.RecursionDesired = q.ID, true, q.RecursionDesired
			r.Question = q.Question
			r.Answer = []dns.RR{
				&dns.CNAME{Hdr: dns.Header{Name: name, Class: dns.ClassINET, TTL: 300}, CNAME: rdata.CNAME{Target: "gitea.novox.internal."}},
				&dns.A{Hdr: dns.Header{Name: "gitea.novox.internal.", Class: dns.ClassINET, TTL: 300}, A: rdata.A{Addr: netip.MustParseAddr("6.6.6.6")}},
			}
			r.Extra = []dns.RR{&dns.A{Hdr: dns.Header{Name: "searxng.zurag.be.", Class: dns.ClassINET, TTL: 300}, A: rdata.A{Addr: netip.MustParseAddr("6.6.6.6")}}}
			r.Pack()
			u.conn.WriteToUDPAddrPort(r.Data, from)
			return
		}
		answerA(u, q, from)
	})
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}})
	askA(t, addr, "sneaky.example.com.")
	for name, want := range map[string]string{"gitea.novox.internal.": "10.89.0.7", "searxng.zurag.be.": "100.64.0.9"} {
		if got := firstA(askA(t, addr, name)); got != want {
			t.Errorf("%s after an upstream answer naming it: %s, want the roster's %s", name, got, want)
		}
	}
	// later.zurag.be is outside the roster, so forwarded and cached.
	if got := firstA(askA(t, addr, "later.zurag.be.")); got != "192.0.2.10" {
		t.Fatalf("later.zurag.be: %s, want the upstream's", got)
	}
	askA(t, addr, "kept.example.com.")
	r := testRoster(8)
	r.Names["later.zurag.be"] = []netip.Addr{netip.MustParseAddr("100.64.0.50")}
	if err := s.Update(r); err != nil {
		t.Fatal(err)
	}
	if got := firstA(askA(t, addr, "later.zurag.be.")); got != "100.64.0.50" {
		t.Errorf("later.zurag.be once the roster has it: %s, want the roster's 100.64.0.50", got)
	}
	before := len(up.queries())
	if got := firstA(askA(t, addr, "kept.example.com.")); got != "192.0.2.10" || len(up.queries()) != before {
		t.Errorf("kept.example.com after a swap: %s, upstream asked %d more times; want the cached answer", got, len(up.queries())-before)
	}
	checkCacheHoldsNoMeshName(t, s)
}

// TestCacheServer: the cache as clients see it: a second question is not
// forwarded, EDNS is answered per client, a refused client stays refused
// for cached names, FlushCache empties it.
func TestCacheServer(t *testing.T) {
	up := startRawUpstream(t, answerA)
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}})
	askA(t, addr, "www.example.com.")
	withEDNS := unpack(t, exchangeRaw(t, addr, packQuery(t, "WWW.Example.com.", dns.TypeA, true)))
	if n := len(up.queries()); n != 1 {
		t.Fatalf("upstream asked %d times, want 1", n)
	}
	if withEDNS.UDPSize != ednsSize || withEDNS.ID != 0x1234 || withEDNS.Question[0].Header().Name != "WWW.Example.com." {
		t.Errorf("cached answer to an EDNS query in other case: size %d, ID %#x, question %q", withEDNS.UDPSize, withEDNS.ID, withEDNS.Question[0].Header().Name)
	}
	if a := firstA(withEDNS); a != "192.0.2.10" {
		t.Errorf("cached answer %q", a)
	}
	noEDNS := exchangeRaw(t, addr, packQuery(t, "www.example.com.", dns.TypeA, false))
	if m := unpack(t, noEDNS); m.UDPSize != 0 {
		t.Errorf("cached answer to a query without EDNS has an OPT record")
	}

	s.refuseLoopback.Store(true)
	if m := askA(t, addr, "www.example.com."); m.Rcode != dns.RcodeRefused || len(m.Answer) != 0 {
		t.Errorf("refused client, cached name: rcode %d, %d answers; want REFUSED, none", m.Rcode, len(m.Answer))
	}
	s.refuseLoopback.Store(false)

	s.FlushCache()
	askA(t, addr, "www.example.com.")
	if n := len(up.queries()); n != 2 {
		t.Errorf("after FlushCache upstream asked %d times in all, want 2", n)
	}
}

// TestForwardFailover: a silent first upstream costs one timeout, then is
// skipped; a port nobody listens on fails at once (ICMP); SERVFAIL only
// when every upstream failed.
func TestForwardFailover(t *testing.T) {
	silent := startRawUpstream(t, func(*rawUpstream, *dns.Msg, netip.AddrPort) {})
	good := startRawUpstream(t, answerA)
	servfail := startRcodeUpstream(t, dns.RcodeServerFailure)
	closed := dnstestClosedPort(t)

	t.Run("silent then good", func(t *testing.T) {
		s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{silent.addr, good.addr}, CacheSize: -1, UpstreamTimeout: 3 * time.Second})
		s.fwd.downFor.Store(int64(time.Hour)) // however slow the machine, still skipped at the 5th query
		before := len(silent.queries())
		for i := range 5 {
			if got := firstA(askAWithin(t, addr, fmt.Sprintf("f%d.example.com.", i), 20*time.Second)); got != "192.0.2.10" {
				t.Fatalf("query %d: %q, want the second upstream's answer", i, got)
			}
		}
		if n := len(silent.queries()) - before; n != 1 {
			t.Errorf("the silent upstream was asked %d times in 5 queries, want 1 (then skipped)", n)
		}
	})
	t.Run("refused port fails over at once", func(t *testing.T) {
		_, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{closed, good.addr}, CacheSize: -1, UpstreamTimeout: 30 * time.Second})
		start := time.Now()
		if got := firstA(askAWithin(t, addr, "r.example.com.", 20*time.Second)); got != "192.0.2.10" {
			t.Fatalf("%q, want the second upstream's answer", got)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v: the refused port was waited for, not failed over", d)
		}
	})
	t.Run("all fail", func(t *testing.T) {
		_, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{servfail.addr, silent.addr, closed}, CacheSize: -1, UpstreamTimeout: time.Second})
		if m := askAWithin(t, addr, "x.example.com.", 20*time.Second); m.Rcode != dns.RcodeServerFailure {
			t.Errorf("every upstream failing: rcode %d, want SERVFAIL", m.Rcode)
		}
	})
	t.Run("servfail then good", func(t *testing.T) {
		_, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{servfail.addr, good.addr}, CacheSize: -1, UpstreamTimeout: 5 * time.Second})
		if got := firstA(askAWithin(t, addr, "y.example.com.", 20*time.Second)); got != "192.0.2.10" {
			t.Errorf("%q, want the second upstream's answer after the first's SERVFAIL", got)
		}
	})
	// An upstream that fails every question with SERVFAIL or REFUSED is
	// skipped like a silent one, not asked first for every question.
	for _, rc := range []struct {
		name  string
		rcode uint16
	}{{"SERVFAIL", dns.RcodeServerFailure}, {"REFUSED", dns.RcodeRefused}} {
		t.Run(rc.name+" upstream skipped", func(t *testing.T) {
			failing := startRcodeUpstream(t, rc.rcode)
			s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{failing.addr, good.addr}, CacheSize: -1, UpstreamTimeout: 5 * time.Second})
			s.fwd.downFor.Store(int64(time.Hour)) // however slow the machine, still skipped at the 10th query
			failures := testutil.ToFloat64(s.metrics.upstreamFailures)
			for i := range 10 {
				if got := firstA(askAWithin(t, addr, fmt.Sprintf("%s%d.example.com.", strings.ToLower(rc.name), i), 20*time.Second)); got != "192.0.2.10" {
					t.Fatalf("query %d: %q, want the second upstream's answer", i, got)
				}
			}
			if n := len(failing.queries()); n != 1 {
				t.Errorf("the %s-only upstream was asked %d times in 10 queries, want 1 (then skipped)", rc.name, n)
			}
			if got := testutil.ToFloat64(s.metrics.upstreamFailures) - failures; got != 1 {
				t.Errorf("upstream failures counted: %v, want 1", got)
			}
		})
	}
}

// startRcodeUpstream is a raw upstream that answers every question with
// rcode and no records.
func startRcodeUpstream(t *testing.T, rcode uint16) *rawUpstream {
	return startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
		r := new(dns.Msg)
		r.ID, r.Response, r.Rcode, r.Question = q.ID, true, rcode, q.Question
		r.Pack()
		u.conn.WriteToUDPAddrPort(r.Data, from)
	})
}

// dnstestClosedPort is a loopback UDP port nothing listens on.
func dnstestClosedPort(t *testing.T) netip.AddrPort {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	a := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	return a
}

// TestForwardInflightBound: beyond the bound, questions get SERVFAIL at
// once instead of waiting; Close answers the ones in flight.
func TestForwardInflightBound(t *testing.T) {
	silent := startRawUpstream(t, func(*rawUpstream, *dns.Msg, netip.AddrPort) {})
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{silent.addr}, UpstreamTimeout: time.Minute})
	s.maxInflight.Store(4)
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 10 {
		c.Write(packQuery(t, fmt.Sprintf("b%d.example.com.", i), dns.TypeA, false))
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 512)
	for i := range 6 {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("reply %d of the 6 over the bound: %v", i, err)
		}
		if m := unpack(t, buf[:n]); m.Rcode != dns.RcodeServerFailure {
			t.Errorf("over the bound: rcode %d, want SERVFAIL", m.Rcode)
		}
	}
	if got := s.inflight.Load(); got != 4 {
		t.Errorf("%d in flight, want the bound, 4", got)
	}
	s.Close()
	if got := s.inflight.Load(); got != 0 {
		t.Errorf("%d in flight after Close, want 0", got)
	}
}

// TestForwardTCPReuse: truncated replies are asked again over TCP, on one
// connection kept open between them.
func TestForwardTCPReuse(t *testing.T) {
	var accepts atomic.Int32
	var up *stub
	for attempt := 0; ; attempt++ { // a UDP and a TCP socket on one port
		pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp4", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			if attempt < 10 {
				continue
			}
			t.Fatal(err)
		}
		up = &stub{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort(), udp: pc, tcp: ln}
		t.Cleanup(func() { pc.Close(); ln.Close() })
		break
	}
	go up.serveUDP(upstreamAnswer) // truncates big.example.com
	go func() {
		for {
			c, err := up.tcp.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			go func() { // any number of queries on one connection
				defer c.Close()
				for {
					var lb [2]byte
					if _, err := io.ReadFull(c, lb[:]); err != nil {
						return
					}
					b := make([]byte, binary.BigEndian.Uint16(lb[:]))
					if _, err := io.ReadFull(c, b); err != nil {
						return
					}
					q := &dns.Msg{Data: b}
					if q.Unpack() != nil {
						return
					}
					r := upstreamAnswer(q, true)
					r.Pack()
					c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(r.Data))), r.Data...))
				}
			}()
		}
	}()
	_, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, CacheSize: -1})
	for i := range 3 {
		got := dig(t, addr, "+tcp", "big.example.com", "TXT")
		if len(got.answer) != 40 {
			t.Fatalf("query %d: %d answers, want 40 (fetched over TCP)\n%s", i, len(got.answer), got.raw)
		}
	}
	if n := accepts.Load(); n != 1 {
		t.Errorf("%d TCP connections to the upstream for 3 truncated replies, want 1 (reused)", n)
	}
}

// TestUpstreamHealth: a failed upstream is asked after the others for
// downFor, twice as long after each further failure, and first again after
// that or after an answer.
func TestUpstreamHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := netip.MustParseAddrPort("127.0.0.1:1001"), netip.MustParseAddrPort("127.0.0.1:1002")
		s, err := New(safeConfig(t, Config{Upstreams: []netip.AddrPort{a, b}}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f := s.fwd
		ab, ba := []netip.AddrPort{a, b}, []netip.AddrPort{b, a}
		check := func(when string, want []netip.AddrPort) {
			t.Helper()
			if got := f.order(ab); !slices.Equal(got, want) {
				t.Errorf("%s: order %v, want %v", when, got, want)
			}
		}
		check("healthy", ab)
		f.failed(a, errTimeout)
		check("after a failure", ba)
		time.Sleep(downFor - time.Millisecond)
		check("just before downFor", ba)
		time.Sleep(time.Millisecond)
		check("after downFor", ab)
		f.failed(a, errTimeout) // second in a row: twice as long
		time.Sleep(downFor)
		check("second failure, after downFor", ba)
		time.Sleep(downFor)
		check("second failure, after twice downFor", ab)
		for range 20 {
			f.failed(a, errTimeout)
		}
		time.Sleep(maxDownFor - time.Millisecond)
		check("many failures, before maxDownFor", ba)
		time.Sleep(time.Millisecond)
		check("many failures, after maxDownFor", ab)
		f.failed(a, errTimeout)
		f.upstream(a).succeeded()
		check("after an answer", ab)
		f.failed(a, errTimeout)
		f.failed(b, errTimeout)
		check("both failed", ab)
	})
}

// TestForwardCloseRetired: Close ends the questions waiting on sockets
// already replaced (rotated after each use here), without waiting for their
// timeouts.
func TestForwardCloseRetired(t *testing.T) {
	silent := startRawUpstream(t, func(*rawUpstream, *dns.Msg, netip.AddrPort) {})
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{silent.addr}, UpstreamTimeout: 10 * time.Minute})
	s.fwd.uses.Store(1)
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 40 {
		c.Write(packQuery(t, fmt.Sprintf("c%d.example.com.", i), dns.TypeA, false))
	}
	waitFor(t, func() bool { return s.inflight.Load() == 40 }, "40 questions in flight")
	u := s.fwd.upstream(silent.addr)
	u.mu.Lock()
	retired := len(u.retired)
	u.mu.Unlock()
	if retired == 0 {
		t.Fatalf("no socket retired after 40 uses at 1 use per socket")
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Close still waiting after a minute: questions on retired sockets wait for their 10-minute timeout")
	}
	if got := s.inflight.Load(); got != 0 {
		t.Errorf("%d in flight after Close, want 0", got)
	}
}

// TestForwardCoalesces: identical questions in flight together go upstream
// once; each client gets its own ID and question case back.
func TestForwardCoalesces(t *testing.T) {
	release := make(chan struct{})
	up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
		go func() {
			<-release
			u.conn.WriteToUDPAddrPort(reply(q, "192.0.2.10"), from)
		}()
	})
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, UpstreamTimeout: time.Minute})
	const n = 10
	names := []string{"www.example.com.", "WWW.example.com.", "wWw.Example.COM."}
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		m := dns.NewMsg(names[i%3], dns.TypeA)
		m.ID = uint16(100 + i)
		m.Pack()
		c.Write(m.Data)
	}
	waitFor(t, func() bool { return s.inflight.Load() == n && len(up.queries()) > 0 }, "all questions in flight, one upstream")
	close(release)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 512)
	ids := map[uint16]bool{}
	for range n {
		nr, err := c.Read(buf)
		if err != nil {
			t.Fatalf("%d of %d answered: %v", len(ids), n, err)
		}
		m := unpack(t, buf[:nr])
		want := names[int(m.ID-100)%3]
		if got := m.Question[0].Header().Name; got != want || firstA(m) != "192.0.2.10" {
			t.Errorf("reply %d: question %q, answer %q; want %q, 192.0.2.10", m.ID, got, firstA(m), want)
		}
		ids[m.ID] = true
	}
	if len(ids) != n {
		t.Errorf("%d distinct IDs answered, want %d", len(ids), n)
	}
	if got := len(up.queries()); got != 1 {
		t.Errorf("upstream asked %d times for one question asked %d times together, want 1", got, n)
	}
}

// together sends n queries for name, with IDs 0 to n-1, spread over a few
// client sockets (so that no socket's receive buffer overflows when the
// answers come at once), and returns a function that reads the n replies,
// raw, by ID.
func together(t *testing.T, server netip.AddrPort, n int, name string) func() map[uint16][]byte {
	t.Helper()
	const sockets = 20
	var cs []net.Conn
	for range sockets {
		c, err := net.Dial("udp", server.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	for i := range n {
		m := dns.NewMsg(name, dns.TypeA)
		m.ID = uint16(i)
		if err := m.Pack(); err != nil {
			t.Fatal(err)
		}
		if _, err := cs[i%sockets].Write(m.Data); err != nil {
			t.Fatal(err)
		}
	}
	return func() map[uint16][]byte {
		t.Helper()
		got := map[uint16][]byte{}
		for i, c := range cs {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 4096)
			for range (n - i + sockets - 1) / sockets { // the queries sent on c
				nr, err := c.Read(buf)
				if err != nil {
					t.Fatalf("%d of %d answered: %v", len(got), n, err)
				}
				got[binary.BigEndian.Uint16(buf)] = bytes.Clone(buf[:nr])
			}
		}
		return got
	}
}

// TestForwardCoalescesMany: however many identical questions are in
// flight together, the upstream is asked once, and each is answered from
// its reply: with the cache on, for an answer the cache does not keep (TTL
// 0), and with the cache off.
func TestForwardCoalescesMany(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int
		ttl   uint32
	}{
		{"cached answer", 0, 60},
		{"answer not cached (TTL 0)", 0, 0},
		{"cache off", -1, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free)
			up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
				go func() {
					<-release
					u.conn.WriteToUDPAddrPort(replyTTL(q, "192.0.2.10", tc.ttl), from)
				}()
			})
			s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, CacheSize: tc.cache, UpstreamTimeout: time.Minute})
			const n = 300
			read := together(t, addr, n, "victim.example.com.")
			waitFor(t, func() bool { return s.inflight.Load() == n && len(up.queries()) > 0 }, "all questions in flight")
			free()
			got := read()
			if len(got) != n {
				t.Errorf("%d distinct IDs answered, want %d", len(got), n)
			}
			for id, b := range got {
				m := unpack(t, b)
				if a := firstA(m); a != "192.0.2.10" || len(m.Answer) != 1 || m.Answer[0].Header().TTL != tc.ttl {
					t.Errorf("reply %d: %v, want 192.0.2.10 with TTL %d", id, m.Answer, tc.ttl)
				}
			}
			if got := len(up.queries()); got != 1 {
				t.Errorf("upstream asked %d times for one question asked %d times together, want 1", got, n)
			}
		})
	}
}

// TestForwardCoalescesUnreadable: when the reply to a question others wait
// for cannot be taken apart to answer them (here a byte after its last
// record), they go upstream, but one at a time, never all at once.
func TestForwardCoalescesUnreadable(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	var mu sync.Mutex // guards the two below
	outstanding, most := 0, 0
	up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
		mu.Lock()
		outstanding++
		most = max(most, outstanding)
		mu.Unlock()
		go func() {
			<-release
			time.Sleep(50 * time.Millisecond) // room for others to arrive, were they sent at once
			mu.Lock()
			outstanding--
			mu.Unlock()
			u.conn.WriteToUDPAddrPort(append(reply(q, "192.0.2.10"), 0), from)
		}()
	})
	s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, UpstreamTimeout: time.Minute})
	const n = 5
	read := together(t, addr, n, "odd.example.com.")
	waitFor(t, func() bool { return s.inflight.Load() == n && len(up.queries()) > 0 }, "all questions in flight")
	free()
	got := read()
	for id := range uint16(n) {
		if b := got[id]; len(b) < headerLen || b[2]&0x80 == 0 {
			t.Errorf("query %d: reply %x, want a response", id, b)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Errorf("up to %d identical questions were upstream at once, want 1", most)
	}
}

// TestForwardEDNSSize: queries go upstream advertising at most 1232 bytes,
// whatever the client advertised, so that no reply is fragmented.
func TestForwardEDNSSize(t *testing.T) {
	var size atomic.Int32
	up := startRawUpstream(t, func(u *rawUpstream, q *dns.Msg, from netip.AddrPort) {
		size.Store(int32(q.UDPSize))
		answerA(u, q, from)
	})
	_, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, CacheSize: -1})
	for _, tc := range []struct{ client, want uint16 }{{4096, ednsSize}, {65535, ednsSize}, {1200, 1200}, {0, 0}} {
		m := dns.NewMsg(fmt.Sprintf("e%d.example.com.", tc.client), dns.TypeA)
		m.ID, m.UDPSize = 7, tc.client
		m.Pack()
		if b := exchangeRaw(t, addr, m.Data); b == nil || firstA(unpack(t, b)) != "192.0.2.10" {
			t.Fatalf("client size %d: no answer", tc.client)
		}
		if got := uint16(size.Load()); got != tc.want {
			t.Errorf("client advertising %d: upstream saw %d, want %d", tc.client, got, tc.want)
		}
	}
}

// TestReplyToTCPDoesNotBlock: a forwarded answer to a TCP client that
// reads nothing does not hold up its sender (an upstream socket's reader,
// which answers every client of that socket).
func TestReplyToTCPDoesNotBlock(t *testing.T) {
	ours, theirs := net.Pipe() // writes block until the other end reads
	defer theirs.Close()
	tc := &tcpConn{c: ours}
	done := make(chan struct{})
	go func() {
		for range 3 {
			replyTo{tcp: tc}.send(make([]byte, 100))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("send to a TCP client that reads nothing blocked")
	}
	// The client reads late: it still gets whole, framed answers.
	theirs.SetReadDeadline(time.Now().Add(5 * time.Second))
	var lb [2]byte
	if _, err := io.ReadFull(theirs, lb[:]); err != nil || binary.BigEndian.Uint16(lb[:]) != 100 {
		t.Fatalf("first frame: length %d, %v; want 100", binary.BigEndian.Uint16(lb[:]), err)
	}
}

// rawQuestion is a message with ID 0x1234 and one question: the wire name
// of labels, qtype and qclass; a response when resp.
func rawQuestion(labels [][]byte, qtype, qclass uint16, resp bool) []byte {
	b := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	if resp {
		b[2] |= 0x80
	}
	for _, l := range labels {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, qtype)
	return binary.BigEndian.AppendUint16(b, qclass)
}

// TestMatches: a reply is taken only when it repeats the query's question:
// the name equal but for the case of ASCII letters, the type and class
// exactly. Neighbours that a looser comparison (Unicode case folding,
// folding every byte with 0x20) would take are refused.
func TestMatches(t *testing.T) {
	l := func(ss ...string) [][]byte {
		out := make([][]byte, len(ss))
		for i, s := range ss {
			out[i] = []byte(s)
		}
		return out
	}
	www := l("www", "example")
	type question struct {
		labels        [][]byte
		qtype, qclass uint16
	}
	for _, tc := range []struct {
		name string
		q, r question
		want bool
	}{
		{"same question", question{www, 1, 1}, question{www, 1, 1}, true},
		{"name in another case", question{l("WwW", "Example"), 1, 1}, question{www, 1, 1}, true},
		{"Z and z", question{l("Z"), 1, 1}, question{l("z"), 1, 1}, true},
		{"another name", question{www, 1, 1}, question{l("wwx", "example"), 1, 1}, false},
		{"labels split elsewhere", question{l("ab", "c"), 1, 1}, question{l("a", "bc"), 1, 1}, false},
		{"qtype HTTPS(65) answered as 97", question{www, 65, 1}, question{www, 97, 1}, false},
		{"qtype SPF(99) answered as 67", question{www, 99, 1}, question{www, 67, 1}, false},
		{"qtype A(1) answered as 33", question{www, 1, 1}, question{www, 33, 1}, false},
		{"qtype 0x4101 answered as 0x6101", question{www, 0x4101, 1}, question{www, 0x6101, 1}, false},
		{"qclass IN(1) answered as 33", question{www, 1, 1}, question{www, 1, 33}, false},
		{"qclass 0x41 answered as 0x61", question{www, 1, 0x41}, question{www, 1, 0x61}, false},
		{`label \200 answered as \201`, question{[][]byte{{0x80}}, 1, 1}, question{[][]byte{{0x81}}, 1, 1}, false},
		{`label \377x answered as \376x`, question{[][]byte{{0xff, 'x'}}, 1, 1}, question{[][]byte{{0xfe, 'x'}}, 1, 1}, false},
		{"é answered as É (UTF-8)", question{l("é"), 1, 1}, question{l("É"), 1, 1}, false},
		{`Latin-1 \300 answered as \340`, question{[][]byte{{0xC0}}, 1, 1}, question{[][]byte{{0xE0}}, 1, 1}, false},
		{"@ answered as `", question{l("@"), 1, 1}, question{l("`"), 1, 1}, false},
		{"[ answered as {", question{l("a["), 1, 1}, question{l("a{"), 1, 1}, false},
		{"K answered as the Kelvin sign", question{l("k"), 1, 1}, question{l("\u212a"), 1, 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := rawQuestion(tc.q.labels, tc.q.qtype, tc.q.qclass, false)
			r := rawQuestion(tc.r.labels, tc.r.qtype, tc.r.qclass, true)
			if got := matches(q, r); got != tc.want {
				t.Errorf("matches(%x, %x) = %v, want %v", q, r, got, tc.want)
			}
		})
	}
	t.Run("header", func(t *testing.T) {
		q := rawQuestion(www, 1, 1, false)
		for _, tc := range []struct {
			name string
			mod  func(r []byte)
		}{
			{"another ID", func(r []byte) { r[1] ^= 1 }},
			{"not a response", func(r []byte) { r[2] &^= 0x80 }},
			{"two questions", func(r []byte) { r[5] = 2 }},
			{"no question", func(r []byte) { r[5] = 0 }},
		} {
			r := rawQuestion(www, 1, 1, true)
			tc.mod(r)
			if matches(q, r) {
				t.Errorf("%s: matches(%x, %x) = true, want false", tc.name, q, r)
			}
		}
	})
}
