package sim

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	seedFlag = flag.Uint64("seed", 0, "run this one seed (replays a failure exactly); 0: draw seeds")
	seeds    = flag.Int("sim.seeds", 0, "run this many seeds (0: as many as -sim.duration allows)")
	duration = flag.Duration("sim.duration", 30*time.Second, "run seeds for this long (when -sim.seeds is 0; -short: 5s)")
	steps    = flag.Int("sim.steps", 120, "steps per seed")
	first    = flag.Uint64("sim.first", 1, "the first seed drawn (seeds are first, first+1, ...)")
)

// TestSim runs the simulation for -sim.duration (or -sim.seeds seeds, or
// the one -seed), and reports the first run that breaks an invariant with
// its seed, the command that replays it, and its schedule.
func TestSim(t *testing.T) {
	var total Stats
	start := time.Now()
	n := 0
	run := func(seed uint64) bool {
		var f *Failure
		var st Stats
		synctest.Test(t, func(t *testing.T) {
			f, st = Run(seed, Options{Steps: *steps, Dir: t.TempDir()})
		})
		n++
		total.add(st)
		if f != nil {
			t.Errorf("%v\nreplay: go test ./internal/testkit/sim -run TestSim -seed %d -sim.steps %d\nschedule:\n%s",
				f, seed, *steps, strings.Join(f.Log, "\n"))
			return false
		}
		return true
	}
	switch {
	case *seedFlag != 0:
		run(*seedFlag)
	case *seeds > 0:
		for s := *first; s < *first+uint64(*seeds); s++ {
			if !run(s) {
				break
			}
		}
	default:
		d := *duration
		if testing.Short() {
			d = min(d, 5*time.Second)
		}
		for s := *first; time.Since(start) < d; s++ {
			if !run(s) {
				break
			}
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds in %s (%.1f seeds/s): %s", n, el.Round(time.Millisecond), float64(n)/el.Seconds(), total.per(n))
}

func (s *Stats) add(o Stats) {
	s.Steps += o.Steps
	s.Passes += o.Passes
	s.Restarts += o.Restarts
	s.Faults += o.Faults
	s.Refused += o.Refused
	s.Accepted += o.Accepted
	s.Quiesces += o.Quiesces
}

func (s Stats) per(n int) string {
	if n == 0 {
		return ""
	}
	f := func(x int) float64 { return float64(x) / float64(n) }
	return fmt.Sprintf("per seed: %.0f steps, %.1f passes, %.1f restarts, %.1f faults, %.1f inputs accepted, %.1f refused, %.1f quiesces",
		f(s.Steps), f(s.Passes), f(s.Restarts), f(s.Faults), f(s.Accepted), f(s.Refused), f(s.Quiesces))
}

// TestSimReplays: a seed's run is the same every time, step by step, so
// that -seed N replays a failure exactly.
func TestSimReplays(t *testing.T) {
	for _, seed := range []uint64{3, 7, 11} {
		var logs [2][]string
		for i := range logs {
			synctest.Test(t, func(t *testing.T) {
				w, _ := trace(seed, Options{Steps: *steps, Dir: t.TempDir()})
				logs[i] = w
			})
		}
		if d := cmp.Diff(logs[0], logs[1]); d != "" {
			t.Errorf("seed %d ran differently the second time (-first +second):\n%s", seed, d)
		}
	}
}
