package natssource

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// memBucket is a roster bucket in memory: its messages in revision order,
// each key keeping its newest history values, as JetStream does.
type memBucket struct {
	history int
	msgs    []memMsg // kept messages, by revision
	rev     uint64
}

type memMsg struct {
	key     string
	rev     uint64
	deleted bool
	value   []byte
}

func (b *memBucket) put(key string, value []byte, deleted bool) uint64 {
	b.rev++
	b.msgs = append(b.msgs, memMsg{key, b.rev, deleted, value})
	var kept []memMsg
	count := map[string]int{}
	for i := len(b.msgs) - 1; i >= 0; i-- {
		m := b.msgs[i]
		if count[m.key] < b.history {
			kept = append(kept, m)
		}
		count[m.key]++
	}
	slices.Reverse(kept)
	b.msgs = kept
	return b.rev
}

// newest returns every key's newest message.
func (b *memBucket) newest() map[string]memMsg {
	out := map[string]memMsg{}
	for _, m := range b.msgs {
		out[m.key] = m
	}
	return out
}

// memWriter follows the writing protocol of the package doc on a
// memBucket, as Publisher.PublishRoster does on a real one.
type memWriter struct {
	b *memBucket
}

// publish writes r (names only; zones fixed) as generation gen. stopAfter
// >= 0 stops after that many name writes, without committing.
func (w memWriter) publish(gen uint64, r map[string][]netip.Addr, stopAfter int) {
	cur := w.b.newest()
	var last, commitRev uint64
	for k, m := range cur {
		if k == CommitKey {
			commitRev = m.rev
			var c Commit
			json.Unmarshal(m.value, &c)
			last = max(last, c.Revision)
			continue
		}
		last = max(last, m.rev)
	}
	_ = commitRev
	writes := 0
	for _, name := range slices.Sorted(maps.Keys(r)) {
		m, ok := cur[NameKey(name)]
		if ok && !m.deleted && string(m.value) == string(encodeAddrs(r[name])) {
			continue
		}
		if writes == stopAfter {
			return
		}
		last = max(last, w.b.put(NameKey(name), encodeAddrs(r[name]), false))
		writes++
	}
	for k, m := range cur {
		name, ok := nameOf(k)
		if !ok || m.deleted {
			continue
		}
		if _, keep := r[name]; keep {
			continue
		}
		if writes == stopAfter {
			return
		}
		last = max(last, w.b.put(k, nil, true))
		writes++
	}
	if stopAfter >= 0 && writes <= stopAfter {
		return
	}
	c := Commit{Version: 1, Generation: gen, Revision: last, Names: len(r), Digest: rosterDigest(r).String(), Zones: []string{"internal"}}
	data, _ := json.Marshal(c)
	w.b.put(CommitKey, data, false)
}

// feed gives st every message of b after revision from, then evaluates.
func feed(t *testing.T, st *rosterState, b *memBucket, from uint64) (*Change, error) {
	t.Helper()
	var refused error
	for _, m := range b.msgs {
		if m.rev <= from {
			continue
		}
		if err := st.observe(m.key, m.rev, m.deleted, m.value); err != nil {
			refused = err
		}
	}
	ch, err := st.evaluate()
	if err == nil {
		err = refused
	}
	return ch, err
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func roster(n int) map[string][]netip.Addr {
	r := map[string][]netip.Addr{}
	for i := range n {
		r[fmt.Sprintf("h%d.internal", i)] = addrs(fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
	}
	return r
}

func names(st *rosterState) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	st.names.each(func(n string, a []netip.Addr) { out[n] = a })
	return out
}

func TestStateDelta(t *testing.T) {
	b := &memBucket{history: History}
	w := memWriter{b}
	r := roster(10)
	w.publish(1, r, -1)
	st := newRosterState()
	ch, err := feed(t, st, b, 0)
	if err != nil || ch == nil || ch.Generation != 1 || len(ch.Set) != 10 || !ch.Full {
		t.Fatalf("first commit: change %+v, err %v; want generation 1 with 10 names set, read whole", ch, err)
	}
	from := b.rev

	// One name moves, one goes, one comes.
	r2 := maps.Clone(r)
	r2["h3.internal"] = addrs("10.9.9.9")
	delete(r2, "h4.internal")
	r2["new.internal"] = addrs("10.8.8.8", "fd00::8")
	w.publish(2, r2, -1)
	ch, err = feed(t, st, b, from)
	if err != nil {
		t.Fatal(err)
	}
	want := &Change{Generation: 2, Previous: 1, Revision: ch.Revision, Zones: []string{"internal"}, Names: 10,
		Set:     map[string][]netip.Addr{"h3.internal": addrs("10.9.9.9"), "new.internal": addrs("10.8.8.8", "fd00::8")},
		Removed: []string{"h4.internal"}}
	if diff := cmp.Diff(want, ch, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("second commit's change (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(r2, names(st), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("roster in force (-want +got):\n%s", diff)
	}
}

func TestStateHalfWrittenNeverApplied(t *testing.T) {
	b := &memBucket{history: History}
	w := memWriter{b}
	r := roster(20)
	w.publish(1, r, -1)
	st := newRosterState()
	if _, err := feed(t, st, b, 0); err != nil {
		t.Fatal(err)
	}
	from := b.rev
	r2 := roster(20)
	for i := range 5 {
		r2[fmt.Sprintf("h%d.internal", i)] = addrs("10.7.7.7")
	}
	w.publish(2, r2, 3) // stops after 3 of 5 writes: no commit
	ch, err := feed(t, st, b, from)
	if ch != nil || err != nil || st.gen != 1 {
		t.Fatalf("half-written change: change %+v err %v generation %d; want nothing applied", ch, err, st.gen)
	}
	if diff := cmp.Diff(r, names(st), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("roster in force after a half-written change (-want +got):\n%s", diff)
	}
	// The next writer repairs and commits; the watcher applies it whole.
	from = b.rev
	w.publish(3, r2, -1)
	ch, err = feed(t, st, b, from)
	if err != nil || ch == nil || ch.Generation != 3 || len(ch.Set) != 5 {
		t.Fatalf("after the repair: change %+v err %v; want generation 3 with 5 names set", ch, err)
	}
	// A watcher that starts now reads it whole, the same.
	fresh := newRosterState()
	if _, err := feed(t, fresh, b, 0); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r2, names(fresh), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("fresh watcher (-want +got):\n%s", diff)
	}
}

// A watcher that starts while a change is half written finds the
// committed values in the history and applies the commit in force.
func TestStateStartDuringHalfWrittenChange(t *testing.T) {
	b := &memBucket{history: History}
	w := memWriter{b}
	r := roster(20)
	w.publish(1, r, -1)
	r2 := maps.Clone(r)
	r2["h1.internal"] = addrs("10.7.7.7")
	r2["h2.internal"] = addrs("10.7.7.8")
	w.publish(2, r2, 1) // h1 rewritten, not committed
	st := newRosterState()
	ch, err := feed(t, st, b, 0)
	if err != nil || ch == nil || ch.Generation != 1 {
		t.Fatalf("start during a half-written change: change %+v err %v; want generation 1", ch, err)
	}
	if diff := cmp.Diff(r, names(st), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("roster in force (-want +got):\n%s", diff)
	}
}

func TestStateRefusals(t *testing.T) {
	b := &memBucket{history: History}
	w := memWriter{b}
	r := roster(5)
	w.publish(5, r, -1)
	st := newRosterState()
	if _, err := feed(t, st, b, 0); err != nil {
		t.Fatal(err)
	}
	commitOf := func(c Commit) []byte { data, _ := json.Marshal(c); return data }
	good := Commit{Version: 1, Generation: 5, Revision: st.through, Names: 5, Digest: rosterDigest(r).String(), Zones: []string{"internal"}}
	for _, tc := range []struct {
		name   string
		write  func()
		reason string
	}{
		{"older generation", func() {
			c := good
			c.Generation = 4
			b.put(CommitKey, commitOf(c), false)
		}, reasonStale},
		{"same generation, another revision", func() {
			b.put(NameKey("h1.internal"), encodeAddrs(addrs("10.6.6.6")), false)
			c := good
			c.Revision = b.rev
			b.put(CommitKey, commitOf(c), false)
		}, reasonStale},
		{"newer generation covering fewer revisions", func() {
			c := good
			c.Generation, c.Revision = 9, st.through-1
			b.put(CommitKey, commitOf(c), false)
		}, reasonStale},
		{"digest that does not add up", func() {
			c := good
			c.Generation, c.Revision = 9, b.rev
			b.put(CommitKey, commitOf(c), false)
		}, reasonInconsistent},
		{"malformed value", func() {
			b.put(NameKey("h2.internal"), []byte(`["10.0.0.300"]`), false)
			c := good
			c.Generation, c.Revision = 9, b.rev
			b.put(CommitKey, commitOf(c), false)
		}, reasonInvalid},
		{"uppercase name", func() {
			b.put(NameKey("UP.internal"), []byte(`["10.0.0.3"]`), false)
			c := good
			c.Generation, c.Revision = 9, b.rev
			b.put(CommitKey, commitOf(c), false)
		}, reasonInvalid},
		{"newer protocol", func() {
			c := good
			c.Generation, c.Version = 9, 2
			b.put(CommitKey, commitOf(c), false)
		}, reasonInvalid},
		{"commit deleted", func() { b.put(CommitKey, nil, true) }, reasonInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := b.rev
			before := names(st)
			tc.write()
			ch, err := feed(t, st, b, from)
			var ce *CommitError
			if ch != nil || !errors.As(err, &ce) || ce.Reason != tc.reason {
				t.Fatalf("change %+v, err %v; want refused as %s", ch, err, tc.reason)
			}
			if st.gen != 5 {
				t.Errorf("generation in force %d, want 5", st.gen)
			}
			if diff := cmp.Diff(before, names(st), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("roster in force changed (-before +after):\n%s", diff)
			}
		})
	}
	// After every refusal, a whole roster published again repairs the
	// bucket, and the watcher applies it.
	from := b.rev
	w.publish(10, r, -1)
	ch, err := feed(t, st, b, from)
	if err != nil || ch == nil || ch.Generation != 10 {
		t.Fatalf("repair: change %+v err %v; want generation 10", ch, err)
	}
	if diff := cmp.Diff(r, names(st), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("roster after the repair (-want +got):\n%s", diff)
	}
}

// A write by someone else among a writer's own makes the commit not add
// up: refused, not applied partially.
func TestStateInterleavedWriteRefused(t *testing.T) {
	b := &memBucket{history: History}
	w := memWriter{b}
	r := roster(5)
	w.publish(1, r, -1)
	st := newRosterState()
	feed(t, st, b, 0)
	from := b.rev
	b.put(NameKey("intruder.internal"), encodeAddrs(addrs("10.66.6.6")), false)
	r2 := maps.Clone(r)
	r2["h1.internal"] = addrs("10.1.1.1")
	// The writer read the bucket before the intruder wrote.
	b.put(NameKey("h1.internal"), encodeAddrs(r2["h1.internal"]), false)
	c := Commit{Version: 1, Generation: 2, Revision: b.rev, Names: 5, Digest: rosterDigest(r2).String(), Zones: []string{"internal"}}
	data, _ := json.Marshal(c)
	b.put(CommitKey, data, false)
	_, err := feed(t, st, b, from)
	var ce *CommitError
	if !errors.As(err, &ce) || ce.Reason != reasonInconsistent {
		t.Fatalf("err %v, want refused as inconsistent", err)
	}
	if _, ok := st.names.get("intruder.internal"); ok || st.gen != 1 {
		t.Errorf("generation %d, intruder in force %v; want generation 1 without it", st.gen, ok)
	}
}

func TestStateSeedResumes(t *testing.T) {
	b := &memBucket{history: History}
	w := memWriter{b}
	r := roster(50)
	w.publish(1, r, -1)
	first := newRosterState()
	feed(t, first, b, 0)
	sn := first.snapshot()

	seeded := newRosterState()
	seeded.seed(sn)
	r2 := maps.Clone(r)
	r2["h7.internal"] = addrs("10.77.0.1")
	w.publish(2, r2, -1)
	ch, err := feed(t, seeded, b, sn.Revision)
	if err != nil || ch == nil || ch.Generation != 2 || len(ch.Set) != 1 || ch.Full {
		t.Fatalf("seeded watcher: change %+v err %v; want generation 2, one name, not read whole", ch, err)
	}
	// The snapshot shared with the seeded watcher is untouched.
	if got := sn.Names["h7.internal"]; !slices.Equal(got, r["h7.internal"]) {
		t.Errorf("the snapshot's h7 became %v", got)
	}
	if diff := cmp.Diff(r2, names(seeded), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("seeded watcher's roster (-want +got):\n%s", diff)
	}
}

// FuzzState runs random writers (whole publishes, stopped ones, stale
// commits, intruders) against watchers that read at random moments,
// some from the start and some resuming, and checks the invariants: a
// watcher's generation never goes backwards, and the roster it has in
// force is always exactly the one committed under that generation.
func FuzzState(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42, 1234} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		b := &memBucket{history: History}
		w := memWriter{b}
		committed := map[uint64]map[string][]netip.Addr{}
		r := roster(8)
		var gen uint64
		type watcher struct {
			st   *rosterState
			read uint64
		}
		ws := []*watcher{{st: newRosterState()}, {st: newRosterState()}}
		for step := 0; step < 60; step++ {
			switch op := rng.IntN(10); {
			case op < 5: // a whole publish of a changed roster
				r = maps.Clone(r)
				for range rng.IntN(3) + 1 {
					name := fmt.Sprintf("h%d.internal", rng.IntN(12))
					if rng.IntN(4) == 0 {
						delete(r, name)
					} else {
						r[name] = addrs(fmt.Sprintf("10.1.%d.%d", rng.IntN(3), rng.IntN(3)+1))
					}
				}
				gen++
				w.publish(gen, r, -1)
				committed[gen] = r
			case op < 6: // a writer that stops half-way
				half := maps.Clone(r)
				half[fmt.Sprintf("h%d.internal", rng.IntN(12))] = addrs("10.5.5.5")
				w.publish(gen+1, half, rng.IntN(2))
			case op < 7: // a stale commit replayed
				if gen > 1 {
					c := Commit{Version: 1, Generation: gen - 1, Revision: b.rev, Names: 1, Digest: digest{}.String()}
					data, _ := json.Marshal(c)
					b.put(CommitKey, data, false)
				}
			case op < 8: // an intruder's write
				b.put(NameKey(fmt.Sprintf("h%d.internal", rng.IntN(12))), encodeAddrs(addrs("10.66.0.1")), false)
			default: // a watcher reads, or a new one starts
				i := rng.IntN(len(ws) + 1)
				if i == len(ws) {
					ws = append(ws, &watcher{st: newRosterState()})
				}
				wa := ws[i]
				before := wa.st.gen
				feed(t, wa.st, b, wa.read)
				wa.read = b.rev
				if wa.st.gen < before {
					t.Fatalf("step %d: watcher %d went from generation %d back to %d", step, i, before, wa.st.gen)
				}
				if wa.st.gen != 0 {
					want := committed[wa.st.gen]
					if diff := cmp.Diff(want, names(wa.st), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
						t.Fatalf("step %d: watcher %d holds generation %d unlike what was committed (-want +got):\n%s", step, i, wa.st.gen, diff)
					}
				}
			}
		}
		// After a final whole publish every watcher converges.
		gen++
		w.publish(gen, r, -1)
		committed[gen] = r
		for i, wa := range ws {
			feed(t, wa.st, b, wa.read)
			if wa.st.gen != gen {
				// A watcher that missed a value the bucket no longer
				// holds reads it whole again, as Watcher does.
				wa.st.reset()
				feed(t, wa.st, b, 0)
			}
			if wa.st.gen != gen {
				t.Fatalf("watcher %d at generation %d after the final publish %d", i, wa.st.gen, gen)
			}
			if diff := cmp.Diff(r, names(wa.st), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Fatalf("watcher %d final roster (-want +got):\n%s", i, diff)
			}
		}
	})
}

func TestParseMachineDeclaration(t *testing.T) {
	for _, tc := range []struct {
		doc, wantErr string
	}{
		{`{"schema": 1, "machine": "ace", "generation": 3, "containers": [{"name": "app", "image": "busybox"}]}`, ""},
		{`{"schema": 1, "machine": "ace", "generation": 3, "roster": {"generation": 1, "names": {}}, "containers": []}`, "roster: the roster travels in the roster bucket"},
		{`{"schema": 1, "machine": "ace", "generation": 0, "containers": []}`, "generation"},
		{`{}`, "schema"},
		{`[1]`, "not a JSON object"},
	} {
		d, err := parseMachineDeclaration([]byte(tc.doc))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("parseMachineDeclaration(%s) = %v", tc.doc, err)
		case tc.wantErr == "" && (d.Machine != "ace" || d.Generation != 3 || d.Roster != nil || len(d.Containers) != 1):
			t.Errorf("parseMachineDeclaration(%s) = %+v", tc.doc, d)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parseMachineDeclaration(%s) = %v, want an error with %q", tc.doc, err, tc.wantErr)
		}
	}
}

// TestDistrustRebuildsTheRosterInForce: after a recovered panic the
// roster in force may be half changed (an apply cut short). distrust
// reads the bucket whole and rebuilds it from what the bucket holds, even
// when the newest record is the one in force (a reset alone skips that
// record, and the damage stays); the rebuilt roster is exactly the one
// committed, and the commits after it apply as before.
func TestDistrustRebuildsTheRosterInForce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		newer bool // a newer commit is written before the bucket is read again
	}{
		{"the record in force", false},
		{"a newer record", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &memBucket{history: 2}
			w := memWriter{b}
			r1 := roster(20)
			w.publish(1, r1, -1)
			st := newRosterState()
			if _, err := feed(t, st, b, 0); err != nil {
				t.Fatal(err)
			}
			// Half an apply: one name changed, one added, one removed.
			st.names.set("h1.internal", addrs("10.66.0.1"))
			st.names.set("stray.internal", addrs("10.66.0.2"))
			st.names.set("h2.internal", nil)
			want, gen := r1, uint64(1)
			if tc.newer {
				want, gen = maps.Clone(r1), 2
				want["h3.internal"] = addrs("10.77.0.3")
				w.publish(2, want, -1)
			}

			st.distrust()
			ch, err := feed(t, st, b, 0)
			if err != nil {
				t.Fatal(err)
			}
			if ch == nil || ch.Generation != gen || ch.Previous != 1 {
				t.Fatalf("after distrust, the evaluation changed %+v; want generation %d from 1", ch, gen)
			}
			if diff := cmp.Diff(want, st.snapshot().Names, addrCmp); diff != "" {
				t.Errorf("roster in force after distrust (-committed +in force):\n%s", diff)
			}

			// And on: the next commit applies to it as a delta.
			next := maps.Clone(want)
			next["h4.internal"] = addrs("10.77.0.4")
			w.publish(gen+1, next, -1)
			ch, err = feed(t, st, b, st.lastRev)
			if err != nil || ch == nil || ch.Full || len(ch.Set) != 1 {
				t.Fatalf("the commit after: change %+v, %v; want h4 alone, not a whole read", ch, err)
			}
			if diff := cmp.Diff(next, st.snapshot().Names, addrCmp); diff != "" {
				t.Errorf("roster in force after the next commit (-committed +in force):\n%s", diff)
			}
		})
	}
}
