package continuity

import (
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

func serve(t *testing.T) netip.AddrPort {
	rc := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(rc, nil, 0o644)
	srv, err := resolver.New(resolver.Config{ResolvConf: rc, Forbidden: func(netip.AddrPort) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Update(&spec.Roster{Generation: 1, Zones: []string{"internal"},
		Names: map[string][]netip.Addr{"a.internal": {netip.MustParseAddr("10.0.0.1")}}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	return srv.Listeners()[0]
}

// TestProber: lookups are counted, a wrong answer and a silent server
// fail, and the gap is the time between answers.
func TestProber(t *testing.T) {
	addr := serve(t)
	good := Start("good", 20*time.Millisecond, time.Second, UDP(addr, "a.internal", netip.MustParseAddr("10.0.0.1")))
	wrong := Start("wrong", 20*time.Millisecond, time.Second, UDP(addr, "a.internal", netip.MustParseAddr("10.0.0.2")))
	silent := Start("silent", 20*time.Millisecond, 200*time.Millisecond, UDP(netip.MustParseAddrPort("127.0.0.1:9"), "a.internal", netip.MustParseAddr("10.0.0.1")))
	from := time.Now()
	time.Sleep(300 * time.Millisecond)
	to := time.Now()
	time.Sleep(300 * time.Millisecond)
	for _, p := range []*Prober{good, wrong, silent} {
		p.Stop()
	}
	g := good.Window(from, to)
	if g.Lookups < 5 || g.Failed != 0 || g.LongestGap <= 0 || g.LongestGap > 250*time.Millisecond {
		t.Errorf("good: %+v; want at least 5 lookups, none failed, a gap between 0 and 250ms", g)
	}
	if w := wrong.Window(from, to); w.Failed != w.Lookups || w.Lookups == 0 {
		t.Errorf("wrong answer: %+v, want every lookup failed", w)
	}
	if s := silent.Window(from, to); s.Failed != s.Lookups || s.Lookups == 0 {
		t.Errorf("silent server: %+v, want every lookup failed", s)
	}
	sum := Sum("all", g, wrong.Window(from, to))
	if sum.Lookups != g.Lookups+wrong.Window(from, to).Lookups {
		t.Errorf("Sum = %+v", sum)
	}
}

// TestNetns: a lookup from a namespace's thread (here this process's own
// namespace, which any test may join) reaches the server.
func TestNetns(t *testing.T) {
	addr := serve(t)
	ns, err := JoinNetns("/proc/self/ns/net")
	if err != nil {
		needs.Missing(t, "cannot join a network namespace here (needs CAP_SYS_ADMIN): %v", err)
	}
	defer ns.Close()
	if err := ns.UDP(addr, "a.internal", netip.MustParseAddr("10.0.0.1"))(t.Context()); err != nil {
		t.Errorf("lookup from the namespace: %v", err)
	}
}
