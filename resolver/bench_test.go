package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// benchRoster is the bench script's roster: n names svc{i}.node{i%50}.mesh.internal.
func benchRoster(n int, gen uint64) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: []string{"mesh.internal"}, Names: make(map[string][]netip.Addr, n)}
	for i := range n {
		r.Names[fmt.Sprintf("svc%d.node%d.mesh.internal", i, i%50)] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
	}
	return r
}

func BenchmarkParseRoster100k(b *testing.B) {
	data, err := benchRoster(100000, 1).MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := specjson.ParseRoster(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate100k(b *testing.B) {
	r := benchRoster(100000, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNormalize100k(b *testing.B) {
	r := benchRoster(100000, 1)
	b.ReportAllocs()
	for b.Loop() {
		r.Normalize()
	}
}

func BenchmarkBuildTable100k(b *testing.B) {
	r := benchRoster(100000, 1).Normalize()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := buildTable(r, 5, 5, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTableSize100k(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	r := benchRoster(100000, 1).Normalize()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb, err := buildTable(r, 5, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	r = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("table of 100k names: %.1f MB heap", float64(after.HeapAlloc-before.HeapAlloc)/1e6)
	runtime.KeepAlive(tb)
}

// BenchmarkHandle is the per-query cost of the packet handler on the bench
// roster (100,000 names), for a hit, a miss in the zone, and the query mix
// of scripts/bench-resolver (90% hits, 10% NXDOMAIN).
func BenchmarkHandle(b *testing.B) {
	s, err := New(safeConfig(b, Config{}))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(benchRoster(100000, 1)); err != nil {
		b.Fatal(err)
	}
	client := netip.MustParseAddr("127.0.0.1")
	mix := make([][]byte, 1000)
	for i := range mix {
		n := (i * 7919) % 100000
		name := fmt.Sprintf("svc%d.node%d.mesh.internal.", n, n%50)
		if i%10 == 9 {
			name = fmt.Sprintf("nx%d.node%d.mesh.internal.", i, i%50)
		}
		mix[i] = packQuery(b, name, 1, false)
	}
	// The "-overlay" cases answer from a view: the roster changed by a
	// delta (Apply) and not merged yet.
	overlay := func() {
		d := &spec.RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"moved.node7.mesh.internal": {netip.MustParseAddr("10.200.0.1")}}}
		if err := s.Apply(d); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name   string
		reqs   [][]byte
		before func()
	}{
		{"hit", [][]byte{packQuery(b, "svc12345.node45.mesh.internal.", 1, false)}, nil},
		{"hit-edns", [][]byte{packQuery(b, "svc12345.node45.mesh.internal.", 1, true)}, nil},
		{"nxdomain", [][]byte{packQuery(b, "nx1.node1.mesh.internal.", 1, false)}, nil},
		{"mix", mix, nil},
		{"slow-ptr", [][]byte{packQuery(b, "57.48.0.10.in-addr.arpa.", 12, false)}, nil},
		{"hit-overlay", [][]byte{packQuery(b, "svc12345.node45.mesh.internal.", 1, false)}, overlay},
		{"hit-in-overlay", [][]byte{packQuery(b, "moved.node7.mesh.internal.", 1, false)}, nil},
		{"mix-overlay", mix, nil},
	} {
		if bc.before != nil {
			bc.before()
		}
		b.Run(bc.name, func(b *testing.B) {
			var sc scratch
			buf := make([]byte, 4096)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if s.handle(bc.reqs[i%len(bc.reqs)], client, true, &sc, buf, replyTo{}) == nil {
					b.Fatal("no reply")
				}
				i++
			}
		})
	}
}

// BenchmarkSwapVisible swaps a 100,000-name roster in and measures, over a
// real UDP socket, how long after Update returns the new roster answers
// (visible-µs; the swap itself happens before Update returns, so this is
// one query's round trip) and how long Update took (update-ms).
func BenchmarkSwapVisible(b *testing.B) {
	r := benchRoster(100000, 1)
	s, err := New(safeConfig(b, Config{}))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(r); err != nil {
		b.Fatal(err)
	}
	addr, err := s.listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	ask := func(name string) bool {
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(packQuery(b, name, 1, false)); err != nil {
			b.Fatal(err)
		}
		n, err := c.Read(buf)
		return err == nil && n > 3 && buf[3]&0x0F == 0 && buf[7] > 0
	}
	var visible, update time.Duration
	gen := uint64(1)
	b.ResetTimer()
	for b.Loop() {
		gen++
		name := fmt.Sprintf("swap%d.mesh.internal", gen)
		r.Generation = gen
		r.Names[name] = []netip.Addr{netip.MustParseAddr("192.0.2.1")}
		start := time.Now()
		if err := s.Update(r); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		for !ask(name + ".") {
			if time.Since(returned) > time.Second {
				b.Fatalf("%s not answered a second after Update returned", name)
			}
		}
		visible += time.Since(returned)
		update += returned.Sub(start)
		delete(r.Names, name)
	}
	b.ReportMetric(float64(visible.Microseconds())/float64(b.N), "visible-µs")
	b.ReportMetric(float64(update.Milliseconds())/float64(b.N), "update-ms")
}

// TestUDPServeAllocs: answering roster names over a real UDP socket
// allocates nothing per query (a per-batch allocation once crept in through
// closures handed to syscall.RawConn).
func TestUDPServeAllocs(t *testing.T) {
	_, addr := newTestServer(t, benchRoster(1000, 1), Config{})
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := packQuery(t, "svc7.node7.mesh.internal.", 1, false)
	buf := make([]byte, 512)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	roundTrip := func() {
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		roundTrip()
	}
	const queries = 2000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range queries {
		roundTrip()
	}
	runtime.ReadMemStats(&after)
	if n := after.Mallocs - before.Mallocs; n > queries/20 {
		t.Errorf("%d allocations for %d queries over UDP, want (nearly) none", n, queries)
	}
}

// cpuTime is the CPU time the process has used, user and system, every
// goroutine included (background merges and compactions too).
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settle waits until no merge or compaction runs, so that a benchmark's
// figures include the background work its operations caused.
func settle(s *Server) {
	for s.merging.Load() || s.state != nil && s.state.compacting.Load() {
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkRosterDelta100k applies one-name deltas to a roster of 100,000
// names (Apply: validate, swap in, save by appending to the state's log),
// each adding a name, so the overlay grows and is merged in the
// background, and the log is folded into the roster file now and then:
// ns/op, B/op and cpu-µs/op include that background work, spread over the
// deltas that caused it. cpu-µs/op is the process's CPU time (every
// goroutine) per delta. "cache=empty" has the cache of outside names on
// and empty; "cache=full" has it full (DefaultCacheSize answers), as on a
// machine that forwards: a swap must not cost the cache's size.
func BenchmarkRosterDelta100k(b *testing.B) {
	for _, bc := range []struct {
		name   string
		cached int
	}{
		{"cache=empty", 0},
		{"cache=full", DefaultCacheSize},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(safeConfig(b, Config{StatePath: filepath.Join(b.TempDir(), "roster.json")}))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.Update(benchRoster(100000, 1)); err != nil {
				b.Fatal(err)
			}
			fillCache(b, s, bc.cached)
			gen := uint64(1)
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				gen++
				d := &spec.RosterDelta{From: gen - 1, To: gen, Set: map[string][]netip.Addr{
					fmt.Sprintf("moved%d.mesh.internal", gen): {netip.AddrFrom4([4]byte{10, 200, byte(gen >> 8), byte(gen)})},
				}}
				if err := s.Apply(d); err != nil {
					b.Fatal(err)
				}
			}
			settle(s)
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			if got := s.cache.len(); got != bc.cached {
				b.Errorf("the cache holds %d answers after the deltas, want the %d it held", got, bc.cached)
			}
		})
	}
}

// fillCache stores n answers for outside names in s's cache, as forwarded
// replies are stored.
func fillCache(tb testing.TB, s *Server, n int) {
	tb.Helper()
	for i := range n {
		name := fmt.Sprintf("h%d.example.com.", i)
		req := packQuery(tb, name, dns.TypeA, false)
		var sc scratch
		if !parseQuery(req, &sc) {
			tb.Fatalf("query for %s does not parse", name)
		}
		s.cache.store(cacheKey(req, &sc), cacheReply(tb, name, dns.RcodeSuccess, []dns.RR{aRR(name, 3600, "192.0.2.1")}, nil, false), time.Now(), s.isMeshName)
	}
	if got := s.cache.len(); got != n {
		tb.Fatalf("the cache holds %d answers, want %d", got, n)
	}
}

// BenchmarkRosterFull100k puts in force a whole roster of 100,000 names
// that differs from the one served by one name (Update, state saved):
// "diff" is Update as it is (it finds the one name and applies it as a
// delta), "compile" compiles the roster whole, as every Update did before
// (a change of the zones forces it). Neither includes reading the roster
// document (BenchmarkParseRoster100k).
func BenchmarkRosterFull100k(b *testing.B) {
	for _, how := range []string{"diff", "compile"} {
		b.Run(how, func(b *testing.B) {
			s, err := New(safeConfig(b, Config{StatePath: filepath.Join(b.TempDir(), "roster.json")}))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			r := benchRoster(100000, 1).Normalize()
			if err := s.Update(r); err != nil {
				b.Fatal(err)
			}
			gen := uint64(1)
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				gen++
				r.Generation = gen
				r.Names[fmt.Sprintf("moved%d.mesh.internal", gen)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 200, byte(gen >> 8), byte(gen)})}
				if how == "compile" {
					r.Zones = []string{"mesh.internal", fmt.Sprintf("z%d.internal", gen%2)}
				}
				if err := s.Update(r); err != nil {
					b.Fatal(err)
				}
			}
			settle(s)
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
