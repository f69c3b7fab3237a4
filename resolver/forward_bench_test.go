package resolver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
)

// fastUpstream is a loopback upstream cheap enough not to be what a
// forwarding benchmark measures: it answers every A question with one
// address (TTL ttl), straight from the query's bytes, and counts them.
type fastUpstream struct {
	addr    netip.AddrPort
	conn    *net.UDPConn
	queries atomic.Int64
}

func startFastUpstream(tb testing.TB, ttl uint32) *fastUpstream {
	tb.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	u := &fastUpstream{addr: c.LocalAddr().(*net.UDPAddr).AddrPort(), conn: c}
	tb.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		out := make([]byte, 0, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			u.queries.Add(1)
			q := buf[:n]
			end, ok := questionEnd(q)
			if !ok {
				continue
			}
			out = append(out[:0], q[:end]...)
			out[2] = 0x80 | q[2]&0x01
			out[3] = 0x80
			binary.BigEndian.PutUint16(out[6:], 1)
			out[8], out[9], out[10], out[11] = 0, 0, 0, 0
			out = append(out, 0xC0, headerLen, 0, 1, 0, 1)
			out = binary.BigEndian.AppendUint32(out, ttl)
			out = append(out, 0, 4, 192, 0, 2, 1)
			c.WriteToUDPAddrPort(out, from)
		}
	}()
	return u
}

// loadClient sends queries from one UDP socket keeping window of them in
// flight, and counts the answers. It returns the number answered within
// timeout of the last send.
func loadClient(tb testing.TB, server netip.AddrPort, queries [][]byte, n, window int) int {
	tb.Helper()
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(server))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	var answered atomic.Int64
	credit := make(chan struct{}, window)
	for range window {
		credit <- struct{}{}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for answered.Load() < int64(n) {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Read(buf); err != nil {
				return
			}
			answered.Add(1)
			credit <- struct{}{}
		}
	}()
	q := make([]byte, 0, 512)
	for i := range n {
		select {
		case <-credit:
		case <-done:
			return int(answered.Load())
		case <-time.After(2 * time.Second):
			// A lost reply: its credit never comes back, send anyway.
		}
		q = append(q[:0], queries[i%len(queries)]...)
		binary.BigEndian.PutUint16(q, uint16(i))
		if _, err := c.Write(q); err != nil {
			tb.Fatal(err)
		}
	}
	<-done
	return int(answered.Load())
}

// outsideQueries are n distinct A questions for names outside the mesh.
func outsideQueries(tb testing.TB, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = packQuery(tb, fmt.Sprintf("host%d.example.net.", i), 1, false)
	}
	return out
}

// BenchmarkForward is one forwarded query end to end over loopback: a
// client socket, the server, a loopback upstream and back, 64 in flight.
// "nocache" asks distinct names with the cache off (every query goes
// upstream); "cached" asks 1,000 names over and over with the cache on.
func BenchmarkForward(b *testing.B) {
	for _, bc := range []struct {
		name  string
		cache int
		names int
	}{
		{"nocache", -1, 5000},
		{"cached", 10000, 1000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := startFastUpstream(b, 300)
			s, err := New(safeConfig(b, Config{Upstreams: []netip.AddrPort{up.addr}, CacheSize: bc.cache}))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Update(benchRoster(1000, 1)); err != nil {
				b.Fatal(err)
			}
			addr, err := s.listen(netip.MustParseAddrPort("127.0.0.1:0"))
			if err != nil {
				b.Fatal(err)
			}
			qs := outsideQueries(b, bc.names)
			loadClient(b, addr, qs, 200, 16) // warm up
			b.ReportAllocs()
			b.ResetTimer()
			got := loadClient(b, addr, qs, b.N, 64)
			b.StopTimer()
			if got < b.N*99/100 {
				b.Fatalf("%d of %d queries answered", got, b.N)
			}
			b.ReportMetric(float64(up.queries.Load())/float64(b.N+200), "upstream/op")
		})
	}
}

// BenchmarkCacheStore is what a forwarded miss costs the cache: storing
// the answer of a new name in a full cache (DefaultCacheSize answers),
// which evicts the oldest. "cname" answers are a CNAME and the target's
// address, so they depend on two names.
func BenchmarkCacheStore(b *testing.B) {
	for _, bc := range []struct {
		name  string
		cname bool
	}{{"a", false}, {"cname", true}} {
		b.Run(bc.name, func(b *testing.B) {
			c := testCache(b, DefaultCacheSize, DefaultCacheMaxTTL, DefaultCacheMaxNegativeTTL)
			n := 2 * DefaultCacheSize
			keys, replies := make([][]byte, n), make([][]byte, n)
			for i := range n {
				name := fmt.Sprintf("h%d.example.com.", i)
				req := packQuery(b, name, dns.TypeA, false)
				var sc scratch
				if !parseQuery(req, &sc) {
					b.Fatalf("query for %s does not parse", name)
				}
				keys[i] = bytes.Clone(cacheKey(req, &sc))
				answer := []dns.RR{aRR(name, 3600, "192.0.2.1")}
				if bc.cname {
					target := fmt.Sprintf("h%d.cdn.example.net.", i)
					answer = []dns.RR{cnameRR(name, target), aRR(target, 3600, "192.0.2.1")}
				}
				replies[i] = cacheReply(b, name, dns.RcodeSuccess, answer, nil, false)
			}
			now := time.Now()
			for i := range DefaultCacheSize {
				c.store(keys[i], replies[i], now, notMesh)
			}
			b.ReportAllocs()
			for i := DefaultCacheSize; b.Loop(); i++ {
				c.store(keys[i%n], replies[i%n], now, notMesh)
			}
		})
	}
}
