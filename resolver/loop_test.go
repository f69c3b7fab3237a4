package resolver

import (
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// loopServer starts a server listening on addr with upstreams ups, logging
// to the returned buffer.
func loopServer(t *testing.T, addr netip.AddrPort, ups ...netip.AddrPort) (*Server, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	cfg := safeConfig(t, Config{Upstreams: ups, UpstreamTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	cfg.NoLoopQuestions = false
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.listen(addr); err != nil {
		t.Fatal(err)
	}
	return s, logs
}

// servfailAtOnce asks server a name outside the mesh and wants SERVFAIL
// well before an upstream's timeout: nothing is forwarded into a loop.
func servfailAtOnce(t *testing.T, server netip.AddrPort) {
	t.Helper()
	start := time.Now()
	r := unpack(t, exchangeRaw(t, server, packQuery(t, "example.org.", dns.TypeA, false)))
	if r.Rcode != dns.RcodeServerFailure || time.Since(start) > 500*time.Millisecond {
		t.Errorf("%s: rcode %s after %v, want SERVFAIL at once (no upstream left)", server, dns.RcodeToString[r.Rcode], time.Since(start))
	}
}

// loopLines returns the lines of logs that report an upstream loop.
func loopLines(logs *syncbuf.Buffer) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "upstream loop:") && strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return out
}

// waitLoop waits for the line logging the loop of two resolvers, in the
// log of either (the one whose question came back first; the other then
// has an upstream that forwards nothing to it), naming the upstream and the
// resolver's own address; it returns the log it is in.
func waitLoop(t *testing.T, alog, blog *syncbuf.Buffer, pa, pb netip.AddrPort) *syncbuf.Buffer {
	t.Helper()
	waitFor(t, func() bool { return len(loopLines(alog))+len(loopLines(blog)) > 0 }, "the loop logged")
	logs, up, own := alog, pb, pa
	if len(loopLines(alog)) == 0 {
		logs, up, own = blog, pa, pb
	}
	l := loopLines(logs)[0]
	if !strings.Contains(l, "upstream="+up.String()) || !strings.Contains(l, own.String()) {
		t.Errorf("loop line %q, want upstream=%s and the resolver's own %s", l, up, own)
	}
	return logs
}

// answered asks server name, outside the mesh, and wants an answer from
// upstream: anything but SERVFAIL.
func answered(t *testing.T, server netip.AddrPort, name string) {
	t.Helper()
	if r := unpack(t, exchangeRaw(t, server, packQuery(t, name, dns.TypeA, false))); r.Rcode == dns.RcodeServerFailure {
		t.Errorf("%s: SERVFAIL for %s, want the upstream's answer", server, name)
	}
}

// TestUpstreamLoop: two loopback resolvers, each the other's upstream,
// find the loop (at the start, and when upstreams change to make one at
// runtime), log it once with the addresses, and forward nothing into it
// (SERVFAIL at once, not after timeouts); so does a resolver whose upstream
// is its own listen address. Undone, the loop is found gone.
func TestUpstreamLoop(t *testing.T) {
	t.Run("each the other's upstream from the start", func(t *testing.T) {
		pa, pb := dnstest.FreePort(t), dnstest.FreePort(t)
		a, alog := loopServer(t, pa, pb)
		b, blog := loopServer(t, pb, pa)
		waitLoop(t, alog, blog, pa, pb)
		for range 3 {
			servfailAtOnce(t, pa)
			servfailAtOnce(t, pb)
		}
		// Checked again: found again, not logged again, and not taken
		// back (each answers SERVFAIL now: no loop, and no answer).
		a.kickLoopCheck()
		b.kickLoopCheck()
		time.Sleep(300 * time.Millisecond)
		servfailAtOnce(t, pa)
		if na, nb := len(loopLines(alog)), len(loopLines(blog)); na > 1 || nb > 1 {
			t.Errorf("the loop logged %d and %d times, want once at most by each:\n%s\n%s", na, nb, alog, blog)
		}
		if s := alog.String() + blog.String(); strings.Contains(s, "no longer forwards back") {
			t.Errorf("a loop taken back while it lasts:\n%s", s)
		}
	})

	t.Run("made at runtime, then undone", func(t *testing.T) {
		up := startStub(t, upstreamAnswer)
		pa, pb := dnstest.FreePort(t), dnstest.FreePort(t)
		a, alog := loopServer(t, pa, up.addr)
		b, blog := loopServer(t, pb, up.addr)
		answered(t, pa, "example.org.")
		answered(t, pb, "example.org.")
		// Each now forwards to the other (a resolv.conf rewritten, say).
		a.setUpstreams([]netip.AddrPort{pb})
		b.setUpstreams([]netip.AddrPort{pa})
		logs := waitLoop(t, alog, blog, pa, pb)
		servfailAtOnce(t, pa)
		servfailAtOnce(t, pb)

		// Undone by the other: it forwards to the upstream again; the
		// one that found the loop finds it gone at its next check.
		finder, other := a, b
		if logs == blog {
			finder, other = b, a
		}
		other.setUpstreams([]netip.AddrPort{up.addr})
		finder.kickLoopCheck()
		waitFor(t, func() bool { return strings.Contains(logs.String(), "no longer forwards back") }, "the loop found gone")
		// (example.org's SERVFAIL is cached for a second: another name.)
		answered(t, pa, "undone.example.org.")
		answered(t, pb, "undone.example.org.")
		if t.Failed() {
			t.Logf("a's log:\n%s\nb's log:\n%s", alog, blog)
		}
	})

	t.Run("its own listen address", func(t *testing.T) {
		pa := dnstest.FreePort(t)
		_, alog := loopServer(t, pa, pa)
		waitFor(t, func() bool { return len(loopLines(alog)) > 0 }, "the loop logged")
		if l := loopLines(alog)[0]; !strings.Contains(l, "upstream="+pa.String()) || !strings.Contains(l, "own listen address") {
			t.Errorf("loop line %q, want upstream=%s, its own listen address", l, pa)
		}
		servfailAtOnce(t, pa)
		servfailAtOnce(t, pa)
		if n := len(loopLines(alog)); n != 1 {
			t.Errorf("the loop logged %d times, want once:\n%s", n, alog)
		}
	})
}

func TestOwnAddress(t *testing.T) {
	own := []netip.AddrPort{netip.MustParseAddrPort("10.88.0.1:53"), netip.MustParseAddrPort("0.0.0.0:5300"), netip.MustParseAddrPort("[::]:5301")}
	for _, tc := range []struct {
		upstream string
		want     bool
	}{
		{"10.88.0.1:53", true},    // a listener's address
		{"127.0.0.1:5300", true},  // loopback, on a wildcard listener's port
		{"0.0.0.0:5300", true},    // the wildcard itself
		{"[::1]:5301", true},      // the same, IPv6
		{"10.88.0.1:5353", false}, // another port
		{"127.0.0.1:53", false},   // no wildcard listener on 53
		{"192.0.2.1:5300", false}, // another machine (the question check finds this machine's others)
		{"127.0.0.53:53", false},  // systemd-resolved's stub
	} {
		if got := ownAddress(netip.MustParseAddrPort(tc.upstream), own); got != tc.want {
			t.Errorf("ownAddress(%s) = %t, want %t", tc.upstream, got, tc.want)
		}
	}
}

// TestLoopCheckAsksOnlyThisMachine: the loop check's questions go to
// upstreams on this machine only (loopback, an interface's address), never
// to one of the resolver's own addresses nor off the machine: tests and
// hosts whose upstream is another machine send it no question of ours.
func TestLoopCheckAsksOnlyThisMachine(t *testing.T) {
	lo := netip.MustParseAddrPort("127.0.0.53:53")
	iface := netip.MustParseAddrPort("10.88.0.1:53")
	remote := netip.MustParseAddrPort("192.0.2.1:53")
	own := netip.MustParseAddrPort("127.0.0.1:53")
	local := map[netip.Addr]bool{iface.Addr(): true}
	got := loopCheckTargets([]netip.AddrPort{lo, iface, remote, own}, []netip.AddrPort{own}, local)
	if want := []netip.AddrPort{lo, iface}; !slices.Equal(got, want) {
		t.Errorf("loopCheckTargets = %v, want %v", got, want)
	}
	if got := loopCheckTargets([]netip.AddrPort{remote}, []netip.AddrPort{own}, localAddrs()); len(got) != 0 {
		t.Errorf("a TEST-NET upstream is asked: %v", got)
	}
}
