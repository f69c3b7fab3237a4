package resolver

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"
)

// A name that joins the roster while the upstream answers a question for
// it is answered from the roster: for the client, for every identical
// question merged into it, over UDP and TCP, with a truncated UDP reply
// asked again over TCP, and when asked again afterwards (nothing cached).
func TestJoinedDuringForwardAnsweredFromRoster(t *testing.T) {
	const name = "late.example.com."
	roster := netip.MustParseAddr("10.89.0.99")
	outside := netip.MustParseAddr("192.0.2.66")
	for _, tc := range []struct {
		what      string
		clients   int  // identical questions in flight
		tcp       bool // the clients ask over TCP
		truncated bool // the upstream's UDP reply is truncated
		silent    bool // the upstream never answers
	}{
		{what: "upstream silent", clients: 2, silent: true},
		{what: "direct", clients: 1},
		{what: "merged waiters", clients: 3},
		{what: "tcp client", clients: 1, tcp: true},
		{what: "truncated, asked again over tcp", clients: 2, truncated: true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			asked := make(chan struct{}, 8)
			release := make(chan struct{})
			var questions atomic.Int32
			up := startStub(t, func(q *dns.Msg, tcp bool) *dns.Msg {
				if !strings.EqualFold(q.Question[0].Header().Name, name) {
					return upstreamAnswer(q, tcp)
				}
				questions.Add(1)
				asked <- struct{}{}
				<-release
				if tc.silent {
					return nil
				}
				r := new(dns.Msg)
				r.ID, r.Response, r.RecursionAvailable, r.RecursionDesired = q.ID, true, true, q.RecursionDesired
				r.Question = q.Question
				if tc.truncated && !tcp {
					r.Truncated = true
					return r
				}
				r.Answer = []dns.RR{&dns.A{Hdr: dns.Header{Name: q.Question[0].Header().Name, Class: dns.ClassINET, TTL: 3600}, A: rdata.A{Addr: outside}}}
				return r
			})
			s, addr := newTestServer(t, testRoster(7), Config{Upstreams: []netip.AddrPort{up.addr}, UpstreamTimeout: upstreamTimeout(tc.silent)})
			q := packQuery(t, name, dns.TypeA, true)
			replies := make([][]byte, tc.clients)
			var wg sync.WaitGroup
			for i := range tc.clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if tc.tcp {
						replies[i] = exchangeTCPRaw(t, addr, q)
					} else {
						replies[i] = exchangeRawWait(addr, q, 10*time.Second)
					}
				}()
				if i == 0 {
					<-asked
				}
			}
			waitFor(t, func() bool { return s.inflight.Load() == int64(tc.clients) }, "every question in flight")
			joined := testRoster(8)
			joined.Names["late.example.com"] = []netip.Addr{roster}
			if err := s.Update(joined); err != nil {
				t.Fatalf("Update: %v", err)
			}
			close(release) // a silent upstream: the forwarder times out
			wg.Wait()
			check := func(who string, b []byte) {
				t.Helper()
				if b == nil {
					t.Fatalf("%s: no reply", who)
				}
				m := unpack(t, b)
				if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
					t.Fatalf("%s: rcode %d, answer %v; want the roster's one A", who, m.Rcode, m.Answer)
				}
				a, ok := m.Answer[0].(*dns.A)
				if !ok || a.A.Addr != roster {
					t.Fatalf("%s: answer %v, want %v from the roster (the upstream said %v)", who, m.Answer[0], roster, outside)
				}
				if a.Header().TTL == 3600 {
					t.Fatalf("%s: TTL %d is the upstream's", who, a.Header().TTL)
				}
			}
			for i, b := range replies {
				check("client "+string(rune('0'+i)), b)
			}
			check("asked again", exchangeRawWait(addr, q, 2*time.Second))
		})
	}
}

// exchangeRawWait is exchangeRaw with a deadline of d; nil on timeout.
func exchangeRawWait(server netip.AddrPort, q []byte, d time.Duration) []byte {
	c, err := net.Dial("udp", server.String())
	if err != nil {
		return nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write(q); err != nil {
		return nil
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// exchangeTCPRaw sends q over TCP and returns the reply; nil on failure.
func exchangeTCPRaw(t *testing.T, server netip.AddrPort, q []byte) []byte {
	c, err := net.Dial("tcp", server.String())
	if err != nil {
		return nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(q)))
	if _, err := c.Write(append(msg, q...)); err != nil {
		return nil
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return nil
	}
	return b
}

func upstreamTimeout(silent bool) time.Duration {
	if silent {
		return time.Second // runs out after the swap: the test swaps before releasing the upstream
	}
	return 10 * time.Second
}
