package resolver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/meshhost/meshhost/spec"
)

// deltaWorld draws rosters and deltas over few labels, so that names nest
// (empty non-terminals appear and vanish), share addresses (PTR answers
// with several names), sit in nested zones, outside any zone, and at a
// zone's apex.
type deltaWorld struct {
	rng   *rand.Rand
	zones []string
}

func newDeltaWorld(seed uint64) *deltaWorld {
	return &deltaWorld{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), zones: []string{"internal", "x.internal"}}
}

func (w *deltaWorld) name() string {
	labels := []string{"a", "b", "c", "x"}
	suffix := []string{"internal", "x.internal", "example.com"}[w.rng.IntN(3)]
	depth := w.rng.IntN(3)
	parts := make([]string, 0, depth+1)
	for range depth {
		parts = append(parts, labels[w.rng.IntN(len(labels))])
	}
	return strings.Join(append(parts, suffix), ".")
}

func (w *deltaWorld) addrs() []netip.Addr {
	n := 1 + w.rng.IntN(3)
	var out []netip.Addr
	for range n {
		if w.rng.IntN(4) == 0 {
			out = append(out, netip.AddrFrom16([16]byte{0xfd, 15: byte(w.rng.IntN(6))}))
		} else {
			out = append(out, netip.AddrFrom4([4]byte{10, 0, 0, byte(w.rng.IntN(6))}))
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func (w *deltaWorld) roster(gen uint64, n int) *spec.Roster {
	r := &spec.Roster{Generation: gen, Zones: w.zones, Names: map[string][]netip.Addr{}}
	for range n {
		r.Names[w.name()] = w.addrs()
	}
	return r
}

// delta changes up to n names of r: sets new ones, moves, removes.
func (w *deltaWorld) delta(r *spec.Roster, to uint64, n int) *spec.RosterDelta {
	d := &spec.RosterDelta{From: r.Generation, To: to, Set: map[string][]netip.Addr{}}
	names := slices.Sorted(mapKeys(r.Names))
	seen := map[string]bool{}
	for range 1 + w.rng.IntN(n) {
		var name string
		if len(names) > 0 && w.rng.IntN(2) == 0 {
			name = names[w.rng.IntN(len(names))]
		} else {
			name = w.name()
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		if w.rng.IntN(3) == 0 {
			d.Remove = append(d.Remove, name)
		} else {
			d.Set[name] = w.addrs()
		}
	}
	return d
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// observe is everything a table answers about the names and addresses of
// a world: whether each name exists, its addresses, whether it is an
// apex, and every PTR answer.
func observe(tb *table, w *deltaWorld) string {
	var b strings.Builder
	for _, suffix := range []string{"internal", "x.internal", "example.com"} {
		for _, l1 := range []string{"", "a.", "b.", "c.", "x."} {
			for _, l2 := range []string{"", "a.", "b.", "c.", "x."} {
				n := l2 + l1 + suffix
				h, found, zi := tb.lookupName(n)
				fmt.Fprintf(&b, "%s found=%v zone=%d apex=%v addrs=%v\n", n, found, zi, h.apex, addrList(h.a4, h.a6))
			}
		}
	}
	for i := range 6 {
		for _, a := range []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), netip.AddrFrom16([16]byte{0xfd, 15: byte(i)})} {
			fmt.Fprintf(&b, "ptr %s %v\n", a, tb.reverse(a))
		}
	}
	fmt.Fprintf(&b, "generation %d, %d names, serial %d\n", tb.gen, tb.count, tb.zones[0].soa[len(tb.zones[0].soa)-20:][:4])
	return b.String()
}

// TestApplyDifferential: a roster changed by a random sequence of deltas,
// applied as overlays and merged in the background, answers every name and
// address exactly as the same roster compiled whole.
func TestApplyDifferential(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newDeltaWorld(seed)
			want := w.roster(1, 1+w.rng.IntN(20)).Normalize()
			s, err := New(safeConfig(t, Config{}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.mergeAt = 1 + w.rng.IntN(12)
			if err := s.Update(want); err != nil {
				t.Fatal(err)
			}
			for gen := uint64(2); gen < 40; gen++ {
				d := w.delta(want, gen, 6)
				if err := s.Apply(d); err != nil {
					t.Fatalf("Apply(%+v): %v", d, err)
				}
				if _, err := want.Apply(d.Normalize()); err != nil {
					t.Fatal(err)
				}
				whole, err := buildTable(want, 5, 5, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := s.table.Load()
				if diff := cmp.Diff(observe(whole, w), observe(got, w)); diff != "" {
					t.Fatalf("generation %d after %+v: view answers differ from the roster compiled whole (-whole +view):\n%s", gen, d, diff)
				}
				if diff := cmp.Diff(want, s.Roster(), cmpAddr); diff != "" {
					t.Fatalf("generation %d: Roster() (-want +got):\n%s", gen, diff)
				}
				compacted, err := got.compact(nil)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(observe(whole, w), observe(compacted, w)); diff != "" {
					t.Fatalf("generation %d: the view compacted answers differently (-whole +compacted):\n%s", gen, diff)
				}
			}
		})
	}
}

// TestRebase: a merge compiles an earlier view while more deltas arrive;
// the view it swaps in (the latest changes over the new compiled table)
// answers as the latest roster compiled whole.
func TestRebase(t *testing.T) {
	for seed := range uint64(40) {
		w := newDeltaWorld(seed)
		want := w.roster(1, 1+w.rng.IntN(20)).Normalize()
		cur, err := buildTable(want, 5, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		gen := uint64(1)
		step := func(n int) {
			for range n {
				gen++
				d := w.delta(want, gen, 5).Normalize()
				if cur, err = cur.apply(d); err != nil {
					t.Fatal(err)
				}
				want.Apply(d)
			}
		}
		step(1 + w.rng.IntN(8))
		v := cur
		nb, err := v.compact(nil)
		if err != nil {
			t.Fatal(err)
		}
		step(w.rng.IntN(8)) // arriving while the merge compiled
		got := cur.rebase(v, nb)
		whole, _ := buildTable(want, 5, 5, nil)
		if diff := cmp.Diff(observe(whole, w), observe(got, w)); diff != "" {
			t.Fatalf("seed %d: rebased view (-whole +rebased):\n%s", seed, diff)
		}
		if got.base != nb {
			t.Errorf("seed %d: the rebased view is not over the new table", seed)
		}
	}
}

func TestApplyRefuses(t *testing.T) {
	s, _ := newTestServer(t, testRoster(7), Config{})
	one := map[string][]netip.Addr{"new.internal": {netip.MustParseAddr("10.0.0.1")}}
	for _, tc := range []struct {
		name  string
		d     *spec.RosterDelta
		is    error
		match string
	}{
		{"stale", &spec.RosterDelta{From: 6, To: 7, Set: one}, ErrStaleGeneration, "serving 7"},
		{"older base", &spec.RosterDelta{From: 6, To: 8, Set: one}, spec.ErrDeltaBase, "from generation 6, serving 7"},
		{"newer base", &spec.RosterDelta{From: 8, To: 9, Set: one}, spec.ErrDeltaBase, "from generation 8, serving 7"},
		{"invalid name", &spec.RosterDelta{From: 7, To: 8, Set: map[string][]netip.Addr{"a..b.internal": {netip.MustParseAddr("10.0.0.1")}}}, nil, `set["a..b.internal"]`},
		{"set and removed", &spec.RosterDelta{From: 7, To: 8, Set: one, Remove: []string{"NEW.internal"}}, nil, "either set or removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Apply(tc.d)
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.match) {
				t.Fatalf("Apply = %v, want %v saying %q", err, tc.is, tc.match)
			}
			if got := s.Roster().Generation; got != 7 {
				t.Errorf("serving %d after a refused delta, want 7", got)
			}
		})
	}
}

// TestApplyAnswers: a delta's names answer (and removed ones do not) as
// soon as Apply returns, over the fast and the slow path.
func TestApplyAnswers(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestServer(t, testRoster(7), Config{Registerer: reg})
	d := &spec.RosterDelta{From: 7, To: 8,
		Set:    map[string][]netip.Addr{"new.deep.novox.internal": {netip.MustParseAddr("10.0.0.9")}, "gitea.novox.internal": {netip.MustParseAddr("10.89.0.8")}},
		Remove: []string{"v6only.novox.internal"}}
	if err := s.Apply(d); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		want  []string
	}{
		{"new.deep.novox.internal.", dns.TypeA, dns.RcodeSuccess, []string{"new.deep.novox.internal. 5 IN A 10.0.0.9"}},
		{"deep.novox.internal.", dns.TypeA, dns.RcodeSuccess, nil}, // an empty non-terminal now
		{"gitea.novox.internal.", dns.TypeA, dns.RcodeSuccess, []string{"gitea.novox.internal. 5 IN A 10.89.0.8"}},
		{"v6only.novox.internal.", dns.TypeAAAA, dns.RcodeNameError, nil},
		{"8.0.89.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"8.0.89.10.in-addr.arpa. 5 IN PTR gitea.novox.internal."}},
		{"7.0.89.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, nil}, // no longer anyone's: forwarded, and SERVFAIL without upstreams
	} {
		m := ask(t, s, tc.name, tc.qtype)
		if tc.name == "7.0.89.10.in-addr.arpa." {
			if len(m.Answer) != 0 {
				t.Errorf("%s: %v, want no roster answer", tc.name, answers(m))
			}
			continue
		}
		if int(m.Rcode) != tc.rcode || !slices.Equal(answers(m), tc.want) {
			t.Errorf("%s %s = %s %v, want %s %v", tc.name, dns.TypeToString[tc.qtype], dns.RcodeToString[m.Rcode], answers(m), dns.RcodeToString[uint16(tc.rcode)], tc.want)
		}
		if m.Rcode == dns.RcodeNameError || len(m.Answer) == 0 {
			if len(m.Ns) != 1 || !strings.Contains(m.Ns[0].String(), " 8 3600 600 86400 ") {
				t.Errorf("%s: authority %v, want the SOA with serial 8", tc.name, m.Ns)
			}
		}
	}
	if got := counter(t, reg, "meshhost_resolver_swaps_total", "delta"); got != 1 {
		t.Errorf("swaps_total{how=delta} = %v, want 1", got)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name, how string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if how == "" || labelIs(m, "how", how) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestUpdateDiffs: a whole roster that changes few names is applied as a
// delta (how="diff"), one that changes many or the zones is compiled
// (how="whole"), and both answer as the roster says.
func TestUpdateDiffs(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestServer(t, nil, Config{Registerer: reg})
	w := newDeltaWorld(7)
	r := w.roster(1, 40).Normalize()
	if err := s.Update(r); err != nil {
		t.Fatal(err)
	}
	next := w.roster(2, 40).Normalize()
	next.Names = map[string][]netip.Addr{}
	for n, a := range r.Names {
		next.Names[n] = a
	}
	delete(next.Names, slices.Sorted(mapKeys(next.Names))[0])
	next.Names["new.internal"] = []netip.Addr{netip.MustParseAddr("10.1.0.1")}
	if err := s.Update(next); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "meshhost_resolver_swaps_total", "diff"); got != 1 {
		t.Errorf("swaps_total{how=diff} = %v, want 1 (a two-name change)", got)
	}
	whole, _ := buildTable(next, 5, 5, nil)
	if diff := cmp.Diff(observe(whole, w), observe(s.table.Load(), w)); diff != "" {
		t.Errorf("after a diffed Update (-whole +served):\n%s", diff)
	}
	other := w.roster(3, 40).Normalize() // nearly every name differs
	if err := s.Update(other); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, reg, "meshhost_resolver_swaps_total", "whole"); got != 2 {
		t.Errorf("swaps_total{how=whole} = %v, want 2 (the first roster and a different one)", got)
	}
	if diff := cmp.Diff(other, s.Roster(), cmpAddr); diff != "" {
		t.Errorf("Roster() (-want +got):\n%s", diff)
	}
}

// TestApplySaves: a delta is saved by appending it to the log beside the
// roster file (which stays as it is); a restart serves the roster the file
// and the log make; a record torn by a crash is dropped; once the log
// outgrows half the roster file it is folded into it in the background.
func TestApplySaves(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "roster.json")
	w := newDeltaWorld(3)
	want := w.roster(1, 30).Normalize()
	s, _ := newTestServer(t, want, Config{StatePath: state})
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	for gen := uint64(2); gen <= 5; gen++ {
		d := w.delta(want, gen, 3)
		if err := s.Apply(d); err != nil {
			t.Fatal(err)
		}
		want.Apply(d.Normalize())
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Error("a delta rewrote the roster file")
	}
	records, _, err := deltalog.Read(LogPath(state))
	if err != nil || len(records) != 4 {
		t.Fatalf("log holds %d records (%v), want 4", len(records), err)
	}
	s.Close()

	got, err := LoadState(state)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpAddr); diff != "" {
		t.Fatalf("LoadState (-want +got):\n%s", diff)
	}

	// A crash in the middle of appending the next record.
	f, err := os.OpenFile(LogPath(state), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`6 0badc0de {"from": 5, "generation": 6, "set": {"torn.inte`)
	f.Close()
	s2, _ := newTestServer(t, nil, Config{StatePath: state})
	if diff := cmp.Diff(want, s2.Roster(), cmpAddr); diff != "" {
		t.Fatalf("after a torn record, the restarted server serves (-want +got):\n%s", diff)
	}
	// The next delta follows the last whole record, not the torn one.
	d := &spec.RosterDelta{From: 5, To: 6, Set: map[string][]netip.Addr{"after.internal": {netip.MustParseAddr("10.9.9.9")}}}
	if err := s2.Apply(d); err != nil {
		t.Fatal(err)
	}
	want.Apply(d)

	// Enough deltas to outgrow half the roster file (and minCompact):
	// folded into the file in the background.
	for gen := uint64(7); gen < 1200; gen++ {
		d := &spec.RosterDelta{From: gen - 1, To: gen, Set: map[string][]netip.Addr{fmt.Sprintf("n%d.internal", gen%50): {netip.AddrFrom4([4]byte{10, 8, byte(gen >> 8), byte(gen)})}}}
		if err := s2.Apply(d); err != nil {
			t.Fatal(err)
		}
		want.Apply(d)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s2.state.compacting.Load() || s2.state.store.LogSize() > deltalog.MinCompact {
		if time.Now().After(deadline) {
			t.Fatalf("the log still holds %d bytes", s2.state.store.LogSize())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s2.Close()
	got, err = LoadState(state)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpAddr); diff != "" {
		t.Fatalf("after compaction, LoadState (-want +got):\n%s", diff)
	}
}
