package resolver

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"codeberg.org/miekg/dns"
	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func TestUpdateRefusesInvalid(t *testing.T) {
	s, _ := newTestServer(t, testRoster(7), Config{})
	bad := testRoster(8)
	bad.Names["a..b.internal"] = []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	err := s.Update(bad)
	var fe *spec.FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), `names["a..b.internal"]`) {
		t.Fatalf("Update(invalid) = %v, want a *spec.FieldError naming the entry", err)
	}
	if got := s.Roster().Generation; got != 7 {
		t.Errorf("after a refused roster, serving generation %d, want 7", got)
	}
}

func TestUpdateRefusesStaleGeneration(t *testing.T) {
	s, _ := newTestServer(t, testRoster(7), Config{})
	for _, gen := range []uint64{7, 6} {
		r := testRoster(gen)
		r.Names["new.internal"] = []netip.Addr{netip.MustParseAddr("10.0.0.1")}
		if err := s.Update(r); !errors.Is(err, ErrStaleGeneration) {
			t.Errorf("Update(generation %d) over 7 = %v, want ErrStaleGeneration", gen, err)
		}
	}
	if _, ok := s.Roster().Names["new.internal"]; ok {
		t.Error("a stale roster was applied")
	}
}

func TestRosterRoundTrip(t *testing.T) {
	s, _ := newTestServer(t, nil, Config{})
	if s.Roster() != nil || s.Serving() {
		t.Fatal("a new server without state serves a roster")
	}
	in := testRoster(3)
	in.Names["UPPER.Internal."] = []netip.Addr{netip.MustParseAddr("fd00::2"), netip.MustParseAddr("10.0.0.2")}
	if err := s.Update(in); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in.Normalize(), s.Roster(), cmpAddr); diff != "" {
		t.Errorf("Roster() (-want +got):\n%s", diff)
	}
}

// TestPersistence: the last good roster survives a restart and is served
// before any Update.
func TestPersistence(t *testing.T) {
	needDig(t)
	state := filepath.Join(t.TempDir(), "roster.json")
	s1, _ := newTestServer(t, testRoster(7), Config{StatePath: state})
	bad := testRoster(8)
	bad.Names["-bad.internal"] = []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	if err := s1.Update(bad); err == nil {
		t.Fatal("Update(invalid) succeeded")
	}
	s1.Close()

	s2, addr := newTestServer(t, nil, Config{StatePath: state})
	if diff := cmp.Diff(testRoster(7).Normalize(), s2.Roster(), cmpAddr); diff != "" {
		t.Errorf("roster loaded by New (-want +got):\n%s", diff)
	}
	got := dig(t, addr, "gitea.novox.internal", "A")
	if diff := cmp.Diff([]string{"gitea.novox.internal. 5 IN A 10.89.0.7"}, got.answer); diff != "" {
		t.Errorf("answer from the saved roster (-want +got):\n%s", diff)
	}
	if err := s2.Update(testRoster(7)); !errors.Is(err, ErrStaleGeneration) {
		t.Errorf("Update(generation 7) after loading 7 = %v, want ErrStaleGeneration", err)
	}
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := specjson.ParseRoster(data); err != nil {
		t.Errorf("state file is not a roster file: %v", err)
	}
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(state), ".*tmp*"))
	if len(matches) > 0 {
		t.Errorf("temporary files left behind: %v", matches)
	}
}

func TestCorruptStateIsAnError(t *testing.T) {
	state := writeFile(t, "roster.json", `{"generation": 0}`)
	_, err := New(safeConfig(t, Config{StatePath: state}))
	if err == nil || !strings.Contains(err.Error(), state) {
		t.Errorf("New with a corrupt state file = %v, want an error naming it", err)
	}
}

// swapRoster is generation g of a roster whose every address says g: a
// query answered from a mix of two rosters would show two generations.
func swapRoster(g uint64) *spec.Roster {
	r := &spec.Roster{Generation: g, Zones: []string{"mesh.internal"}, Names: map[string][]netip.Addr{}}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(g >> 8), byte(g), byte(i)}) }
	var multi []netip.Addr
	for i := range 20 {
		multi = append(multi, addr(i+1))
	}
	r.Names["multi.mesh.internal"] = multi
	for i := range 200 {
		r.Names[fmt.Sprintf("n%d.mesh.internal", i)] = []netip.Addr{addr(100)}
	}
	// Each generation has a name of its own.
	r.Names[fmt.Sprintf("g%d.mesh.internal", g)] = []netip.Addr{addr(200)}
	return r
}

// TestSwapIsAtomic: while rosters are swapped in a loop, every answer comes
// from one roster, and a reader never sees a generation go backwards. Run it
// with -race.
func TestSwapIsAtomic(t *testing.T) {
	s, err := New(safeConfig(t, Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(swapRoster(1)); err != nil {
		t.Fatal(err)
	}
	const swaps = 300
	var done atomic.Bool
	var wg sync.WaitGroup
	client := netip.MustParseAddr("127.0.0.1")
	for w := range 4 {
		wg.Go(func() {
			var sc scratch
			buf := make([]byte, 4096)
			last := uint64(0)
			for i := 0; !done.Load(); i++ {
				name := "multi.mesh.internal."
				if i%2 == 1 {
					name = fmt.Sprintf("N%d.mesh.internal.", (i+w)%200)
				}
				m := unpack(t, append([]byte(nil), s.handle(packQuery(t, name, dns.TypeA, i%3 == 0), client, true, &sc, buf, replyTo{})...))
				if len(m.Answer) == 0 {
					t.Errorf("%s: no answer", name)
					return
				}
				var gen uint64
				for _, rr := range m.Answer {
					b := rr.(*dns.A).A.Addr.As4()
					g := uint64(b[1])<<8 | uint64(b[2])
					if gen != 0 && g != gen {
						t.Errorf("%s: one answer mixes generations %d and %d", name, gen, g)
						return
					}
					gen = g
				}
				if gen < last {
					t.Errorf("%s: generation went back from %d to %d", name, last, gen)
					return
				}
				last = gen
			}
		})
	}
	for g := uint64(2); g <= swaps; g++ {
		if err := s.Update(swapRoster(g)); err != nil {
			t.Fatal(err)
		}
		// The new roster answers as soon as Update returns: its own name
		// exists, the previous generation's does not.
		var sc scratch
		buf := make([]byte, 4096)
		m := unpack(t, append([]byte(nil), s.handle(packQuery(t, fmt.Sprintf("g%d.mesh.internal.", g), dns.TypeA, false), client, true, &sc, buf, replyTo{})...))
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("right after Update(%d), its own name: %s with %d answers", g, dns.RcodeToString[m.Rcode], len(m.Answer))
		}
		m = unpack(t, append([]byte(nil), s.handle(packQuery(t, fmt.Sprintf("g%d.mesh.internal.", g-1), dns.TypeA, false), client, true, &sc, buf, replyTo{})...))
		if m.Rcode != dns.RcodeNameError {
			t.Fatalf("right after Update(%d), the previous generation's name: %s, want NXDOMAIN", g, dns.RcodeToString[m.Rcode])
		}
	}
	done.Store(true)
	wg.Wait()
}
