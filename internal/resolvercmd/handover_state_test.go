package resolvercmd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
)

// TestHandoverKeepsTheSavedRoster: a resolver service fed rosters over its
// control socket (a large whole one, then a stream of deltas big enough
// that the log is folded into the roster file again and again, so that
// compactions run while the handovers do) is replaced twice by a
// successor started beside it (the handover socket), the deltas going on
// throughout. Once the last successor owns the state directory, it is
// stopped, and a restart serves the newest generation whose PATCH returned
// success, or newer, with its names; never an older one (issue 22,
// requirement 4: on a handover the predecessor stops every writer,
// compaction included, before the successor owns the state directory).
func TestHandoverKeepsTheSavedRoster(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds thousands of roster deltas")
	}
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	sock, hsock := filepath.Join(dir, "control.sock"), filepath.Join(dir, "handover.sock")
	args := []string{"--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9",
		"--state-dir", stateDir, "--control", sock, "--handover", hsock}

	type proc struct {
		logs   *syncbuf.Buffer
		cancel context.CancelFunc
		done   chan int
	}
	start := func(name string) *proc {
		ctx, cancel := context.WithCancel(context.Background())
		p := &proc{logs: &syncbuf.Buffer{}, cancel: cancel, done: make(chan int, 1)}
		go func() {
			code, err := Run(ctx, "meshhost resolver", p.logs, args)
			if err != nil {
				fmt.Fprintf(p.logs, "Run: %v\n", err)
			}
			p.done <- code
		}()
		t.Cleanup(func() {
			cancel()
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop", name)
			}
			if t.Failed() {
				t.Logf("%s log:\n%s", name, p.logs.String())
			}
		})
		return p
	}
	c := control.NewClient(control.ClientConfig{Path: sock})
	waitServing := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for c.Ping(time.Second) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the control socket does not answer", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	first := start("first resolver")
	waitServing("the first resolver")
	const names = 20000
	base := &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for i := range names {
		base.Names[fmt.Sprintf("n%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})}
	}
	if err := c.Update(base); err != nil {
		t.Fatal(err)
	}

	// The feeder: delta after delta, each moving 200 names; acked is the
	// newest generation whose PATCH returned success.
	var acked atomic.Uint64
	acked.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	wg.Go(func() {
		gen := uint64(1) // served, as far as the feeder knows
		for {
			select {
			case <-stop:
				return
			default:
			}
			d := &spec.RosterDelta{From: gen, To: gen + 1, Set: map[string][]netip.Addr{}}
			for k := range 200 {
				i := (int(gen)*200 + k) % names
				d.Set[fmt.Sprintf("n%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(2 + gen%200), byte(i >> 8), byte(i)})}
			}
			err := c.Apply(d)
			sent.Add(1)
			if err == nil {
				gen++
				acked.Store(gen)
				continue
			}
			// Refused (a handover under way, a delta from another base):
			// ask what is served and go on from it.
			time.Sleep(5 * time.Millisecond)
			if st, err := c.Status(context.Background()); err == nil && st.Generation > 0 {
				gen = st.Generation
			}
		}
	})
	waitSent := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(120 * time.Second)
		for from := sent.Load(); sent.Load() < from+n; {
			if time.Now().After(deadline) {
				t.Fatalf("the feeder sent %d deltas in 120s, want %d", sent.Load()-from, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSent(300) // a few compactions: each record is ~8 KB, the base ~500 KB

	prev := first
	for i := range 2 {
		next := start(fmt.Sprintf("successor %d", i+1))
		select {
		case code := <-prev.done:
			prev.done <- code // for its cleanup
			if code != 0 {
				t.Fatalf("the predecessor exited %d at the handover", code)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("handover %d: the predecessor did not hand over within 60s", i+1)
		}
		waitServing(fmt.Sprintf("successor %d", i+1))
		waitSent(200)
		prev = next
	}
	close(stop)
	wg.Wait()
	want := acked.Load()
	prev.cancel()
	<-prev.done
	prev.done <- 0

	state := filepath.Join(stateDir, "roster.json")
	r, err := resolver.LoadState(state)
	if err != nil {
		t.Fatalf("reading the saved roster: %v", err)
	}
	if r.Generation < want {
		t.Errorf("the saved roster is generation %d, older than %d, whose PATCH returned success", r.Generation, want)
	}
	if len(r.Names) != names {
		t.Errorf("the saved roster holds %d names, want %d", len(r.Names), names)
	}
	if aside, _ := filepath.Glob(resolver.LogPath(state) + ".corrupt-*"); len(aside) > 0 {
		t.Errorf("the saved roster's log was damaged (set aside: %v)", aside)
	}
	if fi, err := os.Stat(resolver.LogPath(state)); err == nil {
		t.Logf("fed %d deltas, %d acknowledged up to generation %d; saved: generation %d, log %d bytes", sent.Load(), want-1, want, r.Generation, fi.Size())
	}

	// A restart serves it.
	start("restarted resolver")
	waitServing("the restarted resolver")
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Generation < want {
		t.Errorf("the restarted resolver serves generation %d, older than %d, whose PATCH returned success", st.Generation, want)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
