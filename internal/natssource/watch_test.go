package natssource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshhost/meshhost/spec"
)

var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// recorder checks every change a watcher applies against what was
// committed: it keeps a mirror of the roster built from the changes
// alone, and compares it with the roster published under that generation
// each time. It is also the watcher's Sink.
type recorder struct {
	t testing.TB

	// mu guards the fields below.
	mu     sync.Mutex
	want   map[uint64]map[string][]netip.Addr // published, by generation
	mirror map[string][]netip.Addr
	gens   []uint64
	faults []string
	full   int
	decls  []*spec.Declaration
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, want: map[uint64]map[string][]netip.Addr{}, mirror: map[string][]netip.Addr{}}
}

// expect records what generation gen is, before it is published.
func (r *recorder) expect(gen uint64, names map[string][]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want[gen] = names
}

func (r *recorder) onChange(ch *Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.gens); n > 0 && ch.Generation <= r.gens[n-1] {
		r.faults = append(r.faults, fmt.Sprintf("generation %d applied after %d", ch.Generation, r.gens[n-1]))
	}
	if ch.Full {
		r.full++
	}
	r.gens = append(r.gens, ch.Generation)
	for name, a := range ch.Set {
		r.mirror[name] = a
	}
	for _, name := range ch.Removed {
		delete(r.mirror, name)
	}
	want, ok := r.want[ch.Generation]
	if !ok {
		r.faults = append(r.faults, fmt.Sprintf("generation %d applied, never published", ch.Generation))
		return
	}
	if len(r.mirror) != ch.Names {
		r.faults = append(r.faults, fmt.Sprintf("generation %d: change says %d names, mirror has %d", ch.Generation, ch.Names, len(r.mirror)))
	}
	if diff := cmp.Diff(want, r.mirror, addrCmp); diff != "" {
		r.faults = append(r.faults, fmt.Sprintf("generation %d applied unlike what was published (-published +applied):\n%s", ch.Generation, diff))
	}
}

func (r *recorder) Put(d *spec.Declaration, origin string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decls = append(r.decls, d)
	if want, ok := r.want[d.Roster.Generation]; ok {
		if diff := cmp.Diff(want, d.Roster.Names, addrCmp); diff != "" {
			r.faults = append(r.faults, fmt.Sprintf("declaration %d with roster %d unlike what was published:\n%s", d.Generation, d.Roster.Generation, diff))
		}
	}
	return nil
}

func (r *recorder) last() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.gens) == 0 {
		return 0
	}
	return r.gens[len(r.gens)-1]
}

// check fails the test for every fault seen.
func (r *recorder) check() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.faults {
		r.t.Error(f)
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func newPublisher(t testing.TB, url string, l Layout) *Publisher {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := NewPublisher(nc, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.EnsureBuckets(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// startWatcher runs a watcher until the test ends.
func startWatcher(t testing.TB, cfg Config) *Watcher {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	w, err := NewWatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of its context's end")
		}
	})
	return w
}

func publishRoster(t testing.TB, p *Publisher, gen uint64, names map[string][]netip.Addr) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.PublishRoster(ctx, &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: names})
	if err != nil {
		t.Fatalf("PublishRoster(%d): %v", gen, err)
	}
	return res
}

// change returns r with k random names set or removed.
func change(rng *rand.Rand, r map[string][]netip.Addr, k, space int) (map[string][]netip.Addr, Delta) {
	out := maps.Clone(r)
	d := Delta{Set: map[string][]netip.Addr{}}
	for range k {
		name := fmt.Sprintf("h%d.internal", rng.IntN(space))
		if _, set := d.Set[name]; set || slices.Contains(d.Removed, name) {
			continue
		}
		if _, ok := out[name]; ok && rng.IntN(4) == 0 {
			delete(out, name)
			d.Removed = append(d.Removed, name)
			continue
		}
		a := addrs(fmt.Sprintf("10.%d.%d.%d", rng.IntN(200), rng.IntN(250), rng.IntN(250)+1))
		out[name] = a
		d.Set[name] = a
	}
	return out, d
}

func TestWatchAppliesDeltas(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	rec := newRecorder(t)
	r := roster(100)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	d := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff, Roster: &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
		Containers: []spec.Container{{Name: "app", Image: "busybox"}}}
	ctx := context.Background()
	if _, err := p.PublishDeclaration(ctx, d); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var changes []*Change
	var mu sync.Mutex
	w := startWatcher(t, Config{Server: Server{URL: url}, Layout: l, Machine: "ace", Sink: rec, Registerer: reg, OnChange: func(ch *Change) {
		rec.onChange(ch)
		mu.Lock()
		changes = append(changes, ch)
		mu.Unlock()
	}})
	waitFor(t, 20*time.Second, "generation 1 applied", func() bool { return rec.last() == 1 })

	// One name moves: the change carries that one name, computed from
	// what was written since, not from a read of the whole bucket.
	r2 := maps.Clone(r)
	r2["h5.internal"] = addrs("10.99.0.5")
	rec.expect(2, r2)
	res, err := p.PublishDelta(ctx, Delta{Generation: 2, Set: map[string][]netip.Addr{"h5.internal": addrs("10.99.0.5")}})
	if err != nil || res.Set != 1 || res.Names != 100 {
		t.Fatalf("PublishDelta = %+v, %v; want one name set, 100 names", res, err)
	}
	waitFor(t, 20*time.Second, "generation 2 applied", func() bool { return rec.last() == 2 })

	// A whole roster with names gone: only the difference is written.
	r3 := maps.Clone(r2)
	delete(r3, "h1.internal")
	delete(r3, "h2.internal")
	r3["new.internal"] = addrs("10.98.0.1", "fd00::1")
	rec.expect(3, r3)
	if res := publishRoster(t, p, 3, r3); res.Set != 1 || res.Removed != 2 {
		t.Errorf("PublishRoster(3) = %+v, want 1 set and 2 removed", res)
	}
	waitFor(t, 20*time.Second, "generation 3 applied", func() bool { return rec.last() == 3 })
	// rec.last moves in rec.onChange, before this test's OnChange appends
	// to changes: wait for that too.
	waitFor(t, 20*time.Second, "generation 3's change recorded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(changes) >= 3
	})

	mu.Lock()
	var full []bool
	for _, ch := range changes {
		full = append(full, ch.Full)
	}
	if !slices.Equal(full, []bool{true, false, false}) {
		mu.Unlock()
		t.Fatalf("changes: full reads %v; want 3 changes, only the first a whole read", full)
	}
	if got := changes[1]; len(got.Set) != 1 || len(got.Removed) != 0 || got.Previous != 1 {
		t.Errorf("generation 2's change = %+v, want h5 alone", got)
	}
	if got := changes[2]; !slices.Equal(got.Removed, []string{"h1.internal", "h2.internal"}) || len(got.Set) != 1 {
		t.Errorf("generation 3's change = set %v removed %v", got.Set, got.Removed)
	}
	mu.Unlock()

	// The sink has the declaration with the roster in force (handed to it
	// after OnChange: waited for).
	var last *spec.Declaration
	waitFor(t, 20*time.Second, "the sink takes roster 3", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		last = rec.decls[len(rec.decls)-1]
		return last.Roster.Generation >= 3
	})
	if last.Generation != 7 || last.Roster.Generation != 3 || len(last.Containers) != 1 {
		t.Errorf("sink's last declaration: generation %d roster %d containers %d; want 7, 3, 1", last.Generation, last.Roster.Generation, len(last.Containers))
	}
	if got := metricValue(w.metrics.commits.WithLabelValues("applied")); got != 3 {
		t.Errorf("commits applied = %v, want 3", got)
	}
	if err := w.Health(); err != nil {
		t.Errorf("Health = %v", err)
	}
	rec.check()
}

// Many generations back to back, each a few names: every generation the
// watcher applies is exactly the one published, in order, and it ends at
// the last one.
func TestWatchInOrderUnderLoad(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	rec := newRecorder(t)
	rng := rand.New(rand.NewPCG(7, 8))
	r := roster(300)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	startWatcher(t, Config{Server: Server{URL: url}, Layout: l, OnChange: rec.onChange})
	const gens = 300
	ctx := context.Background()
	for gen := uint64(2); gen <= gens; gen++ {
		var d Delta
		r, d = change(rng, r, 1+rng.IntN(5), 400)
		d.Generation = gen
		rec.expect(gen, r)
		if _, err := p.PublishDelta(ctx, d); err != nil {
			t.Fatalf("PublishDelta(%d): %v", gen, err)
		}
	}
	waitFor(t, 60*time.Second, "the last generation applied", func() bool { return rec.last() == gens })
	rec.check()
	rec.mu.Lock()
	t.Logf("%d generations published, %d applied (the others coalesced into the next), %d whole reads", gens, len(rec.gens), rec.full)
	if rec.full != 1 {
		t.Errorf("%d whole reads, want 1 (the first)", rec.full)
	}
	rec.mu.Unlock()
}

// publishLoop publishes gens generations of random changes, retrying each
// until it is committed whatever the server does, as a controller would:
// a delta first, the whole roster after any failure.
func publishLoop(t testing.TB, p *Publisher, rec *recorder, r map[string][]netip.Addr, first, last uint64, onGen func(uint64)) map[string][]netip.Addr {
	rng := rand.New(rand.NewPCG(first, last))
	clean := true
	for gen := first; gen <= last; gen++ {
		var d Delta
		r, d = change(rng, r, 1+rng.IntN(4), 300)
		d.Generation = gen
		rec.expect(gen, r)
		deadline := time.Now().Add(2 * time.Minute)
		for attempt := 0; ; attempt++ {
			if time.Now().After(deadline) || t.Failed() {
				t.Fatalf("generation %d not committed after %d attempts", gen, attempt)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			var err error
			if clean {
				_, err = p.PublishDelta(ctx, d)
			} else {
				_, err = p.PublishRoster(ctx, &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: r})
			}
			cancel()
			if err == nil {
				clean = true
				break
			}
			if attempt%20 == 0 {
				t.Logf("generation %d, attempt %d: %v", gen, attempt, err)
			}
			clean = false
			time.Sleep(50 * time.Millisecond)
		}
		if onGen != nil {
			onGen(gen)
		}
	}
	return r
}

// The server is killed (SIGKILL) and restarted twice while a controller
// publishes: no generation applied out of order or unlike what was
// published under it, and the watcher ends at the last one.
//
// A server killed this way may lose writes it acknowledged just before
// (one server, no sync_always: they were not on disk yet), so the
// controller publishes the whole roster once more at the end, as it
// would after seeing its server restart; watchers whose bucket went
// backwards read it whole again and never go backwards themselves.
func TestWatchServerKilledMidStream(t *testing.T) {
	srv := startOwnServer(t)
	l := testLayout(t, srv.URL())
	p := newPublisher(t, srv.URL(), l)
	rec := newRecorder(t)
	r := roster(200)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	w := startWatcher(t, Config{Server: Server{URL: srv.URL()}, Layout: l, OnChange: rec.onChange, Patience: 2 * time.Second, Registerer: prometheus.NewRegistry()})
	waitFor(t, 20*time.Second, "generation 1", func() bool { return rec.last() == 1 })

	const last = 120
	var restarts sync.WaitGroup
	final := publishLoop(t, p, rec, r, 2, last, func(gen uint64) {
		if gen == 40 || gen == 80 {
			srv.kill() // mid-stream: the publisher goes on, and retries
			restarts.Add(1)
			go func() {
				defer restarts.Done()
				time.Sleep(1500 * time.Millisecond)
				if err := srv.startE(); err != nil {
					t.Errorf("restarting the server: %v", err)
				}
			}()
		}
	})
	restarts.Wait()
	publishLoop(t, p, rec, final, last+1, last+1, nil) // the whole roster once more
	waitFor(t, 2*time.Minute, "the last generation applied", func() bool { return rec.last() == last+1 })
	rec.check()
	resumes, resyncs := metricValue(w.metrics.resumes), metricValue(w.metrics.resyncs)
	rec.mu.Lock()
	t.Logf("applied %d of %d generations; %v resumes, %d whole reads, %v resyncs", len(rec.gens), last+1, resumes, rec.full, resyncs)
	if float64(rec.full) > 1+resyncs {
		t.Errorf("%d whole reads with %v resyncs: a reconnect read the bucket whole instead of resuming", rec.full, resyncs)
	}
	rec.mu.Unlock()
	waitFor(t, 20*time.Second, "healthy again", func() bool { return w.Health() == nil })
}

// A partition (a black hole, not a refusal) longer than the watcher's
// patience: the roster in force stays, Health and the metrics say the
// source is unreachable, and once the partition heals the watcher
// resumes after the last revision it read (no whole read) and applies
// what was committed meanwhile.
func TestWatchPartitionLongerThanPatience(t *testing.T) {
	srv := startOwnServer(t)
	l := testLayout(t, srv.URL())
	p := newPublisher(t, srv.URL(), l)
	px := newProxy(t, srv.URL())
	rec := newRecorder(t)
	r := roster(50)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	const patience = 2 * time.Second
	w := startWatcher(t, Config{Server: Server{URL: px.URL()}, Layout: l, OnChange: rec.onChange, Patience: patience, Registerer: prometheus.NewRegistry()})
	waitFor(t, 20*time.Second, "generation 1", func() bool { return rec.last() == 1 })
	resumes := metricValue(w.metrics.resumes)

	px.setCut(true)
	cutAt := time.Now()
	// Changes made during the partition.
	rng := rand.New(rand.NewPCG(1, 2))
	for gen := uint64(2); gen <= 6; gen++ {
		var d Delta
		r, d = change(rng, r, 3, 80)
		d.Generation = gen
		rec.expect(gen, r)
		if _, err := p.PublishDelta(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "Health reports the source unreachable", func() bool { return w.Health() != nil })
	if d := time.Since(cutAt); d < patience {
		t.Errorf("Health failed %s after the cut, before the patience (%s) ran out", d, patience)
	}
	err := w.Health()
	if !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Health = %v, want it to say the source is unreachable", err)
	}
	if live := metricValue(w.metrics.connected); live != 0 {
		t.Errorf("meshhost_natssource_live = %v during the partition, want 0", live)
	}
	if sn := w.Snapshot(); sn == nil || sn.Generation != 1 {
		t.Fatalf("roster in force during the partition: %+v, want generation 1", sn)
	}
	// Longer than the patience, several times over.
	time.Sleep(3 * patience)
	if sn := w.Snapshot(); sn.Generation != 1 || len(sn.Names) != 50 {
		t.Errorf("after %s cut off, roster generation %d with %d names; want generation 1 still served", 3*patience, sn.Generation, len(sn.Names))
	}

	px.setCut(false)
	waitFor(t, 60*time.Second, "generation 6 after the partition", func() bool { return rec.last() == 6 })
	waitFor(t, 20*time.Second, "healthy again", func() bool { return w.Health() == nil })
	rec.check()
	if got := metricValue(w.metrics.resumes); got <= resumes {
		t.Errorf("resumes = %v after the partition, want more than %v", got, resumes)
	}
	rec.mu.Lock()
	if rec.full != 1 {
		t.Errorf("%d whole reads; want only the first (the watch resumes after its last revision)", rec.full)
	}
	rec.mu.Unlock()
}

func TestStaleAndOutOfOrderWritesRefused(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	ctx := context.Background()
	rec := newRecorder(t)
	r := roster(10)
	rec.expect(5, r)
	publishRoster(t, p, 5, r)
	w := startWatcher(t, Config{Server: Server{URL: url}, Layout: l, Machine: "ace", Sink: rec, OnChange: rec.onChange, Registerer: prometheus.NewRegistry()})
	waitFor(t, 20*time.Second, "generation 5", func() bool { return rec.last() == 5 })

	// The publisher refuses an older generation, and the same generation
	// with another roster; the same roster again changes nothing.
	if _, err := p.PublishRoster(ctx, &spec.Roster{Generation: 4, Zones: []string{"internal"}, Names: r}); !errors.Is(err, ErrStale) {
		t.Errorf("PublishRoster(older) = %v, want ErrStale", err)
	}
	r5b := maps.Clone(r)
	r5b["other.internal"] = addrs("10.1.2.3")
	if _, err := p.PublishRoster(ctx, &spec.Roster{Generation: 5, Zones: []string{"internal"}, Names: r5b}); !errors.Is(err, ErrStale) {
		t.Errorf("PublishRoster(same generation, other roster) = %v, want ErrStale", err)
	}
	if res := publishRoster(t, p, 5, r); !res.Unchanged {
		t.Errorf("PublishRoster(the committed roster again) = %+v, want Unchanged", res)
	}
	if _, err := p.PublishDelta(ctx, Delta{Generation: 5, Set: map[string][]netip.Addr{"x.internal": addrs("10.0.0.9")}}); !errors.Is(err, ErrStale) {
		t.Errorf("PublishDelta(same generation) = %v, want ErrStale", err)
	}

	// A commit with compare-and-set on a revision that is not the
	// newest (a writer that read before another committed): the server
	// refuses it.
	nc, _ := nats.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, l.Roster)
	if err != nil {
		t.Fatal(err)
	}
	ce, _ := kv.Get(ctx, CommitKey)
	rec.expect(6, r)
	publishRoster(t, p, 6, r) // the other writer
	if _, err := p.commit(ctx, kv, Commit{Version: 1, Generation: 7, Revision: ce.Revision(), Names: 10, Digest: rosterDigest(r).String(), Zones: []string{"internal"}}, ce.Revision()); !errors.Is(err, ErrStale) {
		t.Errorf("commit on an old revision = %v, want ErrStale (the server's compare-and-set)", err)
	}
	waitFor(t, 20*time.Second, "generation 6", func() bool { return rec.last() == 6 })

	// Raw writes that skip the protocol's checks: an older generation's
	// record put over the newer one, and a record of the generation in
	// force with another revision. Watchers refuse both.
	for _, c := range []Commit{
		{Version: 1, Generation: 3, Revision: 1, Names: 10, Digest: rosterDigest(r).String(), Zones: []string{"internal"}},
		{Version: 1, Generation: 6, Revision: 2, Names: 10, Digest: rosterDigest(r).String(), Zones: []string{"internal"}},
	} {
		before := metricValue(w.metrics.commits.WithLabelValues(reasonStale))
		data, _ := jsonMarshal(c)
		if _, err := kv.Put(ctx, CommitKey, data); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, fmt.Sprintf("generation %d record refused as stale", c.Generation), func() bool {
			return metricValue(w.metrics.commits.WithLabelValues(reasonStale)) > before
		})
		if g := w.Generation(); g != 6 {
			t.Errorf("generation in force %d after a stale record, want 6", g)
		}
	}

	// Declarations: the publisher refuses an older generation; a raw
	// older one put in the bucket is refused by the watcher.
	decl := func(gen uint64) *spec.Declaration {
		return &spec.Declaration{Schema: 1, Machine: "ace", Generation: gen, MeshNames: spec.FlagOff, Roster: &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}}}
	}
	if _, err := p.PublishDeclaration(ctx, decl(10)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PublishDeclaration(ctx, decl(9)); !errors.Is(err, ErrStale) {
		t.Errorf("PublishDeclaration(older) = %v, want ErrStale", err)
	}
	waitFor(t, 20*time.Second, "declaration 10 delivered", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.decls) > 0 && rec.decls[len(rec.decls)-1].Generation == 10
	})
	mkv, _ := js.KeyValue(ctx, l.Machines)
	before := metricValue(w.metrics.declarations.WithLabelValues(reasonStale))
	if _, err := mkv.Put(ctx, "ace", []byte(`{"schema": 1, "machine": "ace", "generation": 8, "containers": []}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "older declaration refused", func() bool {
		return metricValue(w.metrics.declarations.WithLabelValues(reasonStale)) > before
	})
	if err := mkv.Delete(ctx, "ace"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "deletion refused", func() bool {
		return metricValue(w.metrics.declarations.WithLabelValues(reasonInvalid)) > 0
	})
	rec.mu.Lock()
	if d := rec.decls[len(rec.decls)-1]; d.Generation != 10 {
		t.Errorf("sink's declaration generation %d, want 10 still", d.Generation)
	}
	rec.mu.Unlock()
	rec.check()
}

// A controller stopped half-way: its writes are never applied; a watcher
// that starts meanwhile applies the generation committed before; the
// next whole publish repairs the bucket and every watcher applies it.
func TestHalfWrittenChangeNeverApplied(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	ctx := context.Background()
	rec := newRecorder(t)
	r := roster(30)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	startWatcher(t, Config{Server: Server{URL: url}, Layout: l, OnChange: rec.onChange})
	waitFor(t, 20*time.Second, "generation 1", func() bool { return rec.last() == 1 })

	nc, _ := nats.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, _ := js.KeyValue(ctx, l.Roster)
	for _, name := range []string{"h1.internal", "h2.internal", "brand-new.internal"} {
		if _, err := kv.Put(ctx, NameKey(name), encodeAddrs(addrs("10.44.4.4"))); err != nil {
			t.Fatal(err)
		}
	}
	late := newRecorder(t)
	late.expect(1, r)
	startWatcher(t, Config{Server: Server{URL: url}, Layout: l, OnChange: late.onChange})
	waitFor(t, 20*time.Second, "a watcher started during the half-written change applies generation 1", func() bool { return late.last() == 1 })
	time.Sleep(200 * time.Millisecond)
	if rec.last() != 1 {
		t.Errorf("generation %d applied from uncommitted writes", rec.last())
	}
	if _, err := p.PublishDelta(ctx, Delta{Generation: 2, Set: map[string][]netip.Addr{"h3.internal": addrs("10.3.3.3")}}); !errors.Is(err, ErrNotClean) {
		t.Errorf("PublishDelta on a half-written bucket = %v, want ErrNotClean", err)
	}
	r2 := maps.Clone(r)
	r2["h3.internal"] = addrs("10.3.3.3")
	rec.expect(2, r2)
	late.expect(2, r2)
	res := publishRoster(t, p, 2, r2)
	if res.Set != 3 || res.Removed != 1 { // h1, h2 put back, h3 set; brand-new removed
		t.Errorf("repair publish = %+v, want 3 set, 1 removed", res)
	}
	waitFor(t, 20*time.Second, "generation 2", func() bool { return rec.last() == 2 && late.last() == 2 })
	rec.check()
	late.check()
}

func TestServerOptionsChecked(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		s    Server
		want string
	}{
		{Server{}, "no NATS server URL"},
		{Server{URL: "http://x:4222"}, "want nats://"},
		{Server{URL: "nats://"}, "no host"},
		{Server{URL: "nats://127.0.0.1:1", Creds: dir + "/missing.creds"}, "credentials file"},
		{Server{URL: "nats://127.0.0.1:1", Cert: dir + "/c.pem"}, "both its certificate and its key"},
		{Server{URL: "nats://127.0.0.1:1", CA: dir + "/ca.pem"}, "CA file"},
	} {
		if _, err := NewWatcher(Config{Server: tc.s}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewWatcher(%+v) = %v, want an error with %q", tc.s, err, tc.want)
		}
	}
}

func jsonMarshal(c Commit) ([]byte, error) { return json.Marshal(c) }

// metricValue reads a counter's or gauge's value.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
