package sim

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/testkit/fullfs"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "run this one seed (replays a failure exactly); 0: draw seeds")
	seeds     = flag.Int("sim.seeds", 0, "run this many seeds (0: as many as -sim.duration allows)")
	duration  = flag.Duration("sim.duration", 100*time.Second, "run seeds for this long (when -sim.seeds is 0; -short: 5s): make test runs the package in about two minutes under -race")
	steps     = flag.Int("sim.steps", 120, "steps per seed")
	first     = flag.Uint64("sim.first", 1, "the first seed drawn (seeds are first, first+1, ...)")
	skipFlag  = flag.String("sim.skip", "", "with -seed: leave out these steps (1,4,7-9: a shrunk schedule)")
	strict    = flag.Bool("sim.strict", false, "the resolver never serves an older roster after a restart, even one whose save failed")
	strictDNS = flag.Bool("sim.strictdns", false, "judge DNSServersListened after a failed probe too (sim2-note.md, defect 5)")
	unserved  = flag.Bool("sim.unserved", false, "boot as the agent command does today: the Source learns the served roster only at the first pass")
	showLog   = flag.Bool("sim.log", false, "print every seed's schedule, failed or not")
	shrinkT   = flag.Duration("sim.shrink", 30*time.Second, "how long to shrink a failing schedule (0: do not)")
)

// TestSim runs the simulation for -sim.duration (or -sim.seeds seeds, or
// the one -seed), and reports the first run that breaks an invariant with
// its seed, the command that replays it, and its schedule.
func TestSim(t *testing.T) {
	var total Stats
	start := time.Now()
	n := 0
	skip, err := parseSkip(*skipFlag)
	if err != nil {
		t.Fatalf("-sim.skip: %v", err)
	}
	run := func(seed uint64) bool {
		f, st := runSeed(t, seed, skip)
		n++
		total.add(st)
		if f != nil {
			t.Errorf("%v\nreplay: go test ./internal/testkit/sim -run 'TestSim$' -seed %d -sim.steps %d%s\nschedule:\n%s",
				f, seed, *steps, skipArg(skip), strings.Join(f.Log, "\n"))
			if *shrinkT > 0 && len(skip) == 0 {
				if s, g := shrink(t, seed, f); g != nil && len(s) > 0 {
					t.Errorf("shrunk to %d steps: %v\nreplay: go test ./internal/testkit/sim -run 'TestSim$' -seed %d -sim.steps %d%s\nschedule:\n%s",
						g.Step-len(s), g, seed, *steps, skipArg(s), strings.Join(g.Log, "\n"))
				}
			}
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
	s.ResolveChecks += o.ResolveChecks
	s.AcceptedShrinks += o.AcceptedShrinks
	s.SavedByRetry += o.SavedByRetry
	s.Probes += o.Probes
}

func (s Stats) per(n int) string {
	if n == 0 {
		return ""
	}
	f := func(x int) float64 { return float64(x) / float64(n) }
	return fmt.Sprintf("per seed: %.0f steps, %.1f passes, %.1f restarts, %.1f faults, %.1f inputs accepted, %.1f refused, %.1f quiesces, %.2f resolve-mode roster-only passes judged, %.2f accepted shrinks served, %.2f restarts after a save retry, %.1f probes",
		f(s.Steps), f(s.Passes), f(s.Restarts), f(s.Faults), f(s.Accepted), f(s.Refused), f(s.Quiesces), f(s.ResolveChecks), f(s.AcceptedShrinks), f(s.SavedByRetry), f(s.Probes))
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

// runSeed runs one seed's schedule, without the steps skip names, in a
// synctest bubble of its own.
func runSeed(t *testing.T, seed uint64, skip map[int]bool) (f *Failure, st Stats) {
	synctest.Test(t, func(t *testing.T) {
		opts := Options{Steps: *steps, Dir: t.TempDir(), Skip: skip, Strict: *strict, Unserved: *unserved, StrictDNS: *strictDNS}
		if os.Geteuid() == 0 {
			// The state directory on a small file system of its own, for
			// the full-disk faults; the watched files beside it.
			opts.InDir, opts.Dir = opts.Dir, fullfs.Mount(t, 8<<20)
			opts.Fill = func() func() { return fullfs.Fill(t, opts.Dir, 0) }
		}
		var log []string
		if *showLog {
			opts.trace = &log
		}
		f, st = Run(seed, opts)
		if *showLog {
			t.Logf("seed %d:\n%s", seed, strings.Join(log, "\n"))
		}
	})
	return f, st
}

// shrink leaves out as many steps of seed's failing schedule as it can,
// for -sim.shrink, while the same invariant still fails: halves, then
// quarters, down to single steps. It returns the steps left out and the
// failure of the shrunk schedule.
func shrink(t *testing.T, seed uint64, f *Failure) (map[int]bool, *Failure) {
	deadline := time.Now().Add(*shrinkT)
	skip := map[int]bool{}
	var live []int
	for i := 1; i <= min(f.Step, *steps); i++ {
		live = append(live, i)
	}
	best := f
	for chunk := max(1, len(live)/2); chunk >= 1 && time.Now().Before(deadline); chunk /= 2 {
		for i := 0; i < len(live) && time.Now().Before(deadline); {
			end := min(i+chunk, len(live))
			try := maps.Clone(skip)
			for _, s := range live[i:end] {
				try[s] = true
			}
			// The same invariant, no later: a schedule that fails further
			// on is not a smaller one.
			if g, _ := runSeed(t, seed, try); g != nil && g.Invariant == f.Invariant && g.Step <= best.Step {
				skip, best = try, g
				live = slices.Delete(live, i, end)
				continue
			}
			i = end
		}
		if chunk == 1 {
			break
		}
	}
	// Steps after the failure never run: not named.
	maps.DeleteFunc(skip, func(s int, _ bool) bool { return s > best.Step })
	return skip, best
}

// parseSkip parses -sim.skip: step numbers and ranges, comma-separated.
func parseSkip(s string) (map[int]bool, error) {
	skip := map[int]bool{}
	if s == "" {
		return skip, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		for i := a; i <= b; i++ {
			skip[i] = true
		}
	}
	return skip, nil
}

// skipArg is the -sim.skip argument that names skip's steps.
func skipArg(skip map[int]bool) string {
	if len(skip) == 0 {
		return ""
	}
	steps := slices.Sorted(maps.Keys(skip))
	var parts []string
	for i := 0; i < len(steps); {
		j := i
		for j+1 < len(steps) && steps[j+1] == steps[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", steps[i], steps[j]))
		} else {
			parts = append(parts, strconv.Itoa(steps[i]))
		}
		i = j + 1
	}
	return " -sim.skip " + strings.Join(parts, ",")
}
