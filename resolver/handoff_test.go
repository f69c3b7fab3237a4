package resolver

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/testkit/continuity"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/spec"
)

func rosterWith(gen uint64, addr string) *spec.Roster {
	return &spec.Roster{
		Generation: gen,
		Zones:      []string{"internal"},
		Names:      map[string][]netip.Addr{"gitea.novox.internal": {netip.MustParseAddr(addr)}},
	}
}

// TestHandoffLosesNothing hands a serving Server's sockets to another one
// under steady queries and drains the first: no query fails, and once the
// first is drained the second answers (its roster tells them apart).
func TestHandoffLosesNothing(t *testing.T) {
	old, addr := newTestServer(t, rosterWith(1, "10.89.0.7"), Config{})
	next, err := New(safeConfig(t, Config{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Close() })
	if err := next.Update(rosterWith(2, "10.89.0.8")); err != nil {
		t.Fatal(err)
	}

	either := func(ctx context.Context) error {
		r, err := dnstest.Exchange(dns.NewMsg("gitea.novox.internal.", dns.TypeA), "udp", addr.String(), time.Second)
		if err != nil {
			return err
		}
		if continuity.CheckA(r, netip.MustParseAddr("10.89.0.7")) == nil {
			return nil
		}
		return continuity.CheckA(r, netip.MustParseAddr("10.89.0.8"))
	}
	var probers []*continuity.Prober
	for range 4 {
		probers = append(probers, continuity.Start("udp", 5*time.Millisecond, time.Second, either))
	}
	start := time.Now()
	time.Sleep(100 * time.Millisecond) // traffic before the handoff

	files, err := old.Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Addr != addr {
		t.Fatalf("Files() = %v, want the one listener %s", files, addr)
	}
	got, err := next.ListenFiles(files[0].UDP, files[0].TCP)
	if err != nil {
		t.Fatalf("ListenFiles: %v", err)
	}
	files[0].Close() // next holds its own duplicates
	if got != addr {
		t.Errorf("ListenFiles = %s, want %s", got, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	drained := time.Now()
	time.Sleep(200 * time.Millisecond)
	end := time.Now()
	var sts []continuity.Stats
	for _, p := range probers {
		p.Stop()
		sts = append(sts, p.Window(start, end))
	}
	sum := continuity.Sum("all", sts...)
	if sum.Failed != 0 || sum.Lookups < 20 {
		t.Errorf("%d of %d lookups failed across the handoff (want 0 of at least 20): %v", sum.Failed, sum.Lookups, sum.Errors)
	}
	t.Logf("%d lookups, longest gap %v", sum.Lookups, sum.LongestGap)

	// After the drain only the new server reads the sockets, over UDP and TCP.
	for _, network := range []string{"udp", "tcp"} {
		r, err := dnstest.Exchange(dns.NewMsg("gitea.novox.internal.", dns.TypeA), network, addr.String(), 2*time.Second)
		if err != nil {
			t.Fatalf("%s query after the drain: %v", network, err)
		}
		if err := continuity.CheckA(r, netip.MustParseAddr("10.89.0.8")); err != nil {
			t.Errorf("%s query %v after the drain: %v", network, time.Since(drained), err)
		}
	}
	if l := next.Listeners(); len(l) != 1 || l[0] != addr {
		t.Errorf("next.Listeners() = %v, want [%s]", l, addr)
	}
}

func TestListenFilesRefuses(t *testing.T) {
	a, _ := newTestServer(t, nil, Config{})
	b, _ := newTestServer(t, nil, Config{})
	fa, err := a.Files()
	if err != nil {
		t.Fatal(err)
	}
	defer fa[0].Close()
	fb, err := b.Files()
	if err != nil {
		t.Fatal(err)
	}
	defer fb[0].Close()
	s, err := New(safeConfig(t, Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name     string
		udp, tcp *os.File
		want     string
	}{
		{"two addresses", fa[0].UDP, fb[0].TCP, "must serve one address"},
		{"TCP as UDP", fa[0].TCP, fa[0].TCP, "adopting UDP socket"},
		{"UDP as TCP", fa[0].UDP, fa[0].UDP, "adopting TCP socket"},
		{"missing", fa[0].UDP, nil, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.ListenFiles(tc.udp, tc.tcp); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ListenFiles = %v, want an error with %q", err, tc.want)
			}
		})
	}
	if _, err := s.ListenFiles(fa[0].UDP, fa[0].TCP); err != nil {
		t.Fatalf("ListenFiles(right pair) = %v", err)
	}
	if _, err := s.ListenFiles(fa[0].UDP, fa[0].TCP); err == nil || !strings.Contains(err.Error(), "already listening") {
		t.Errorf("ListenFiles twice = %v, want already listening", err)
	}
}
