package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// Options bound one run.
type Options struct {
	// Steps is the number of steps of the schedule. Default 120.
	Steps int
	// Dir is the state directory's parent (a t.TempDir()).
	Dir string

	// InDir holds the watched file and directory (default: Dir).
	InDir string
	// Fill, when set, fills the file system of Dir (fullfs.Fill) and
	// returns what frees it: the schedule then has full-disk faults.
	Fill func() (release func())
	// Strict holds the resolver to never serving an older roster across a
	// restart, even when the newer one's save failed (see
	// RestartServesNewestSaved): the resolver serves what it cannot save.
	Strict bool
	// Unserved boots as the agent command does today: the Source learns
	// the roster the resolver serves only at the agent's first pass
	// (sim-note.md, defect 2). Default: told at boot, as it should be.
	Unserved bool
	// StrictDNS judges DNSServersListened after a failed probe too
	// (sim2-note.md, defect 5: a rolled-back network is not exposed after
	// a restart while a container still runs on it in resolve mode).
	StrictDNS bool
	// Skip leaves these steps out of the schedule (a shrunk schedule).
	Skip map[int]bool

	trace *[]string // receives the run's log, failed or not
}

// Failure is a run's first violated invariant.
type Failure struct {
	Seed      uint64
	Step      int    // the step after which it was found (0: at boot)
	Invariant string // the invariant's function name
	Err       error
	Log       []string // every step taken, one a line
}

func (f *Failure) Error() string {
	return fmt.Sprintf("seed %d, step %d: %s: %v", f.Seed, f.Step, f.Invariant, f.Err)
}

// Stats is what a run did, for the seeds-per-second and steps-per-seed
// figures.
type Stats struct {
	Steps, Passes, Restarts, Faults, Refused, Accepted, Quiesces int
	// ResolveChecks counts the passes the resolve-mode roster invariant
	// judged (a roster-only change after a converged pass, in resolve
	// mode); AcceptedShrinks the shrinks served after an accept;
	// SavedByRetry the restarts judged by the resolver's save retry.
	ResolveChecks, AcceptedShrinks, SavedByRetry int
	Probes                                       int // the scripted prober's answers
}

// world is one run: the machine (runtime and state directory, which
// outlive incarnations), the incarnation running now, the schedule's
// random source, and what the invariants remember between steps.
type world struct {
	seed uint64
	rng  *rand.Rand
	dir  statedir.Dir
	in   string // the directory of watched files (file and directory inputs)
	// watched is the seed's watched path: "file" or "dir".
	watched string
	// proven: the gate has a passed probe of the runtime's network;
	// probeFailed: the latest probe the agent ran failed.
	proven, probeFailed bool
	// probeFailedBefore: the latest probe before the pass running now
	// failed (a pass exposes the resolver before it probes).
	probeFailedBefore bool
	// created is the container the runtime call being judged created.
	created string
	// natsDecl is what the NATS source delivered last (a roster commit
	// or a whole declaration), which its watcher delivers again at start.
	natsDecl *spec.Declaration
	// paused: the operator paused the migration (meshhost migrate pause);
	// frozen: the machine is frozen (meshhost freeze).
	paused, frozen bool
	// running is every running container's name by ID, as the last
	// runtime call left them.
	running map[string]string
	// modes is each declared name's container's name mode, as the last
	// runtime call left it.
	modes map[string]spec.NameMode
	// fill fills the state directory's file system (nil: no full-disk
	// faults); release frees it while it is full.
	strict, unserved, strictDNS bool // Options.Strict, Options.Unserved, Options.StrictDNS
	fill                        func() (release func())
	release                     func()
	rt                          *memory.Runtime
	m                           *incarnation
	step                        int
	log                         []string
	st                          Stats

	// offered is the highest declaration generation offered; rosterGen the
	// highest roster generation.
	offered, rosterGen uint64
	// rosters records every roster the Source took, by generation (its
	// fingerprint): the resolver must serve one of them.
	rosters map[uint64]string
	// accepted is every declaration the Source took, by generation (a
	// roster commit moves the roster under the same generation), as the
	// journal records it (journalDoc).
	accepted map[uint64][]string
	// back is how far the wall clock has gone back (clockJump): the gate's
	// and the reconciler's clock is synctest's, less back (clock).
	back time.Duration
	// jnlRead is the journal's declarations as read at step jnlStep after
	// jnlPasses passes (world.journal).
	jnlRead            []journal.DeclarationEntry
	jnlStep, jnlPasses int
	// foreign are the containers no reconciler of this machine owns, by
	// name, with their IDs: never touched.
	foreign map[string]string
	// hookErr is the first violation the runtime's Watch hook saw.
	hookErr *violation

	// Between steps: what the last step left, for the monotonic checks.
	headGen, servedGen, savedGen uint64
	declaredRoster               uint64 // the declaration in force's roster generation
	served                       *spec.Roster
	// lastSaved is the saved declaration's generation before the last
	// crash; restarted reports that this step restarted the agent.
	lastSaved     uint64
	servedAtCrash *spec.Roster
	bootServed    *spec.Roster // the roster the resolver served as it booted
	// servedSaved is the last roster the resolver served after a save
	// that returned success; servedUnsaved says the one served since
	// could not be saved (a full disk).
	servedSaved   *spec.Roster
	servedUnsaved bool
	// unsavedAt is when the resolver last could not save the roster it
	// serves; freedAt when the disk was last freed (savedByRetry).
	unsavedAt, freedAt time.Time
	// unsavedAtCrash: the roster served as the agent crashed was not
	// saved; savedAtCrash the newest that was.
	unsavedAtCrash bool
	savedAtCrash   *spec.Roster
	// passedSinceBoot: this incarnation ran a pass (lastPass is its own).
	passedSinceBoot bool
	bootHead        uint64 // the declaration in force as the restart booted, before any input
	restarted       bool
	// refusedInput is set by a step whose input was refused: what must
	// not have changed.
	refusedInput *snapshot
	// lastPass is the last pass's report and error; cleanBefore whether
	// the pass before it left everything converged (for the resolve-mode
	// roster check).
	lastPass    *agent.Report
	lastPassErr error
	cleanBefore bool
	prevDecl    *spec.Declaration
	prevRep     *agent.Report
	passDecl    *spec.Declaration // the declaration of the last pass
}

type violation struct {
	name string
	err  error
}

// stepRand is step's random source in seed's schedule (0: the setup's).
func stepRand(seed uint64, step int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15^uint64(step)))
}

// trace is Run, returning every step's log line, failed or not.
func trace(seed uint64, opts Options) ([]string, *Failure) {
	var log []string
	opts.trace = &log
	f, _ := Run(seed, opts)
	return log, f
}

// Run runs seed's schedule and returns the first invariant it violates,
// or nil. It must run inside a synctest bubble for its clock to be the
// same each time.
func Run(seed uint64, opts Options) (*Failure, Stats) {
	if opts.Steps == 0 {
		opts.Steps = 120
	}
	w := &world{
		seed:      seed,
		rng:       stepRand(seed, 0),
		dir:       statedir.New(filepath.Join(opts.Dir, "state")),
		in:        filepath.Join(cmp.Or(opts.InDir, opts.Dir), "in"),
		fill:      opts.Fill,
		strict:    opts.Strict,
		strictDNS: opts.StrictDNS,
		unserved:  opts.Unserved,
		rosters:   map[uint64]string{},
		accepted:  map[uint64][]string{},
		foreign:   map[string]string{},
		modes:     map[string]spec.NameMode{},
		running:   map[string]string{},
	}
	w.watched = []string{"file", "dir"}[w.rng.IntN(2)]
	w.rt = memory.New(memory.Options{})
	fail := func(name string, err error) *Failure {
		return &Failure{Seed: seed, Step: w.step, Invariant: name, Err: err, Log: w.log}
	}
	if err := w.setup(); err != nil {
		return fail("setup", err), w.st
	}
	defer func() {
		w.m.stop()
		if opts.trace != nil {
			*opts.trace = w.log
		}
	}()
	for w.step = 1; w.step <= opts.Steps; w.step++ {
		if opts.Skip[w.step] {
			continue
		}
		// Each step draws from a source of its own, so that a schedule
		// without some of its steps (shrinking) draws the others alike.
		w.rng = stepRand(seed, w.step)
		w.st.Steps++
		if err := w.doStep(); err != nil {
			name := "step"
			if strings.HasPrefix(err.Error(), "not converged") {
				name = "Converges"
			}
			return fail(name, err), w.st
		}
		if v := w.check(); v != nil {
			return fail(v.name, v.err), w.st
		}
	}
	w.step++
	w.restarted, w.refusedInput = false, nil
	w.logf("quiesce (end of schedule)")
	if err := w.quiesce(); err != nil {
		return fail("Converges", err), w.st
	}
	if v := w.check(); v != nil {
		return fail(v.name, v.err), w.st
	}
	return nil, w.st
}

func (w *world) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("%3d %s ", w.step, time.Now().UTC().Format("15:04:05"))+fmt.Sprintf(format, args...))
}

// setup puts the foreign containers in the runtime, boots the first
// incarnation and proves the network.
func (w *world) setup() error {
	ctx := context.Background()
	// Someone else's containers: one under a name of its own, one under
	// the name an interrupted replacement of app1 would use (the aside
	// owner check), one carrying meshhost's labels for another owner.
	for _, f := range []struct {
		name   string
		labels map[string]string
	}{
		{"postgres-by-hand", nil},
		{"app1" + spec.AsideSuffix, map[string]string{reconcile.LabelManaged: "true", reconcile.LabelOwner: "other"}},
		{"other-owner", map[string]string{reconcile.LabelManaged: "true", reconcile.LabelOwner: "other"}},
	} {
		if f.name == "app1"+spec.AsideSuffix && w.rng.IntN(2) == 0 {
			continue
		}
		id, err := w.rt.Create(ctx, spec.Rendered{Container: spec.Container{Name: f.name, Image: "foreign:1", Labels: f.labels,
			Mounts: []spec.Mount{{Type: spec.MountVolume, Source: "vol-" + f.name, Target: "/data"}}}})
		if err != nil {
			return err
		}
		if err := w.rt.Start(ctx, id); err != nil {
			return err
		}
		w.foreign[f.name] = id
	}
	w.rt.Watch(w.watch)
	m, err := boot(w.dir, w.rt, w.noteServed, !w.unserved, w.clock(), w.probe)
	if err != nil {
		return err
	}
	w.m = m
	// Most seeds start with the network proven (flag on or auto: resolve
	// mode); the others never prove it (the gate must keep the copy).
	if w.proven = w.rng.IntN(4) != 0; w.proven {
		if err := proveNetworks(m.gate); err != nil {
			return err
		}
	}
	w.logf("boot: foreign %s; network proven %v; watched %s", strings.Join(slices.Sorted(mapKeys(w.foreign)), ","), w.proven, w.watched)
	return nil
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

// pass runs one pass of the agent and remembers its outcome.
func (w *world) pass(why string) {
	w.st.Passes++
	w.prevDecl, w.prevRep = w.passDecl, w.lastPass
	w.cleanBefore = w.lastPass != nil && (w.lastPassErr == nil && converged(w.lastPass) || w.blockedByForeign() && w.lastPass.RosterHeld == "" && !w.lastPass.Held.Held() && !w.lastPass.Frozen)
	d, _ := w.m.source.Current()
	w.passDecl = d
	w.probeFailedBefore = w.probeFailed
	rep, err := w.m.agent.Pass(context.Background())
	w.passedSinceBoot = true
	w.lastPass, w.lastPassErr = rep, err
	w.logf("pass (%s): %s", why, describePass(rep, err))
	if err == nil && converged(rep) && w.release == nil && d != nil {
		if err := journalHoldsApplied(w, d); err != nil {
			w.violate("JournalIsTheAcceptedInputs", err)
		}
	}
}

// converged reports whether a pass's plan was all Keep: nothing held,
// frozen, deferred or failed.
func converged(rep *agent.Report) bool {
	if rep == nil || rep.Held.Held() || rep.Frozen || rep.RosterHeld != "" || rep.Result == nil {
		return false
	}
	for _, o := range rep.Result.Outcomes {
		if o.Kind != reconcile.Keep || o.Err != nil || o.Deferred || o.Frozen {
			return false
		}
	}
	return true
}

func describePass(rep *agent.Report, err error) string {
	if rep == nil {
		return fmt.Sprintf("no report, err=%v", err)
	}
	var kinds []string
	if rep.Result != nil {
		for _, o := range rep.Result.Outcomes {
			if o.Kind == reconcile.Keep && o.Err == nil {
				continue
			}
			s := string(o.Kind) + ":" + o.Name
			switch {
			case o.Err != nil:
				s += "!"
			case o.Deferred:
				s += "(deferred)"
			case o.Frozen:
				s += "(frozen)"
			}
			kinds = append(kinds, s)
		}
	}
	out := fmt.Sprintf("gen=%d roster=%d [%s]", rep.Generation, rep.RosterGeneration, strings.Join(kinds, " "))
	if rep.Held.Held() {
		out += " held"
	}
	if rep.Frozen {
		out += " frozen"
	}
	if rep.RosterHeld != "" {
		out += " roster-held"
	}
	if err != nil {
		out += fmt.Sprintf(" err=%.200s", err.Error())
	}
	return out
}

// restart crashes the incarnation and boots the next from the state
// directory; the runtime recovers (a new agent process finds podman as
// the crash left it).
func (w *world) restart(why string) error {
	w.st.Restarts++
	w.lastSaved = savedGeneration(w) // what the state directory holds as the process dies
	w.savedByRetry()
	w.servedAtCrash, w.unsavedAtCrash, w.savedAtCrash = w.m.srv.Roster(), w.servedUnsaved, w.servedSaved
	w.m.stop()
	w.rt.Recover()
	m, err := boot(w.dir, w.rt, w.noteServed, !w.unserved, w.clock(), w.probe)
	if err != nil {
		return fmt.Errorf("restarting: %w", err)
	}
	w.m = m
	w.bootHead, w.bootServed = 0, m.srv.Roster()
	if h, ok := m.source.Head(); ok {
		w.bootHead = h.Declaration.Generation
	}
	w.readWatched()
	w.natsRedeliver()
	w.restarted, w.passedSinceBoot = true, false
	// lastPass and passDecl stay: the containers outlive the crash, and the
	// first pass after it is judged against the last one before.
	w.logf("crash and restart (%s)", why)
	return nil
}

// clock is an incarnation's wall clock: the machine's as it booted. A
// process reads the wall clock with a monotonic reading, which a step
// of the wall clock does not move (time.Time.Sub), so the simulation
// sets the clock back only while no agent runs (clockBack): what a
// step back changes is the times that outlive a process, in its state
// files.
func (w *world) clock() func() time.Time {
	back := w.back
	return func() time.Time { return time.Now().Add(-back) }
}

// probe is the scripted prober's answer for nets: in a seed whose
// network is never proven, a failure, always; in the others a failure one
// probe in three, else a pass. probeFailed remembers the latest outcome
// (FailsClosed).
func (w *world) probe(nets []migrations.Network) []migrations.Result {
	pass := w.proven && w.rng.IntN(3) != 0
	w.probeFailed = !pass
	now := w.clock()()
	out := make([]migrations.Result, 0, len(nets))
	for _, n := range nets {
		r := migrations.Result{Network: n.Name, Kind: migrations.KindBridge, Pass: pass, At: now, Strategy: migrations.StrategyGateway}
		if pass {
			r.DNS = spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Search: []string{"internal"}, Options: []string{"ndots:1"}}
		} else {
			r.Reason = "the scripted probe fails"
		}
		out = append(out, r)
	}
	w.st.Probes++
	w.logf("probe: pass=%v", pass)
	return out
}

// noteServed remembers the roster the resolver serves after a change, and
// whether its save returned success.
func (w *world) noteServed(r *spec.Roster, saved bool) {
	w.servedUnsaved = !saved && !w.strict
	if saved {
		w.servedSaved = r
	} else {
		w.unsavedAt = time.Now()
		w.logf("the resolver serves roster %d, not saved", r.Generation)
	}
}

// savedByRetry marks the roster served as saved once the resolver must
// have saved it again: it retries a failed save every
// resolver.SaveRetryInterval, so one such interval after the later of
// the failure and the disk being freed, with the disk free since, the
// roster it serves is saved (sim-note.md defect 3, fixed).
func (w *world) savedByRetry() {
	if !w.servedUnsaved || w.release != nil {
		return
	}
	since := w.unsavedAt
	if w.freedAt.After(since) {
		since = w.freedAt
	}
	if time.Since(since) > resolver.SaveRetryInterval {
		w.servedUnsaved, w.servedSaved = false, w.m.srv.Roster()
		w.st.SavedByRetry++
	}
}

// natsRedeliver puts again what the NATS source delivered last, as its
// watcher does when it starts: the agent saves a roster that moved without
// its declaration only with the declaration's next generation ("the
// roster source has it"), so without this a restart would lose it.
func (w *world) natsRedeliver() {
	if w.natsDecl == nil {
		return
	}
	_, before := w.m.source.Snapshot()
	err := w.m.source.Put(w.natsDecl, "nats")
	if _, after := w.m.source.Snapshot(); after != before {
		w.logf("nats redelivers declaration %d roster %d: took change %d", w.natsDecl.Generation, w.natsDecl.Roster.Generation, after)
		w.took()
	} else {
		w.logf("nats redelivers declaration %d roster %d: %v", w.natsDecl.Generation, w.natsDecl.Roster.Generation, firstLine(fmt.Sprint(err)))
	}
}

// readWatched reads the watched path, as the agent's watcher does when
// it starts.
func (w *world) readWatched() {
	p := w.watchedPath()
	if _, err := os.Stat(p); err != nil {
		return
	}
	_, before := w.m.source.Snapshot()
	w.m.source.ReadPath(p)
	if _, after := w.m.source.Snapshot(); after != before {
		w.logf("watched %s read at start: took change %d", w.watched, after)
		w.took()
	}
}

// watchedPath is the seed's watched file or directory.
func (w *world) watchedPath() string {
	if w.watched == "dir" {
		return filepath.Join(w.in, "decl.d")
	}
	return filepath.Join(w.in, "declaration.json")
}

// quiesce stops every fault and lets the operator undo every control
// (unfreeze, approve what is held, accept a held roster), then runs
// passes, moving the clock past the budget's window when it deferred
// work: the machine must converge within a bounded number of passes.
func (w *world) quiesce() error {
	w.st.Quiesces++
	w.rt.Recover()
	w.freeDisk()
	if err := agent.SetFrozen(w.dir, nil); err != nil {
		return err
	}
	w.frozen = false
	if _, ok := w.m.source.Head(); !ok {
		return nil // nothing declared: nothing to converge to
	}
	const maxPasses = 8
	for i := range maxPasses {
		if rep := w.lastPass; rep != nil {
			if rep.Held.Held() {
				if err := agent.ApproveDeclaration(w.dir, rep.Held.Generation); err != nil {
					return err
				}
			}
			if h, _ := agent.LoadRosterHold(w.dir); h != nil && rep.RosterHeld != "" {
				if err := agent.AcceptRoster(w.dir, h.Newest); err != nil {
					return err
				}
			}
			if rep.Result != nil && rep.Result.Deferred > 0 {
				time.Sleep(Budget.Window)
			}
		}
		w.pass(fmt.Sprintf("quiesce %d", i+1))
		if w.lastPassErr == nil && converged(w.lastPass) {
			return w.convergedState()
		}
		if w.blockedByForeign() && w.lastPass != nil && !w.lastPass.Held.Held() && w.lastPass.RosterHeld == "" {
			return w.convergedState()
		}
	}
	return fmt.Errorf("not converged after %d passes without faults: %s", maxPasses, describePass(w.lastPass, w.lastPassErr))
}

// freeDisk frees the state directory's file system, when it is full.
func (w *world) freeDisk() {
	if w.release != nil {
		w.release()
		w.release, w.freedAt = nil, time.Now()
		w.logf("disk freed")
	}
}

// blockedByForeign reports whether the last pass did all it could: every
// outcome is Keep, or a Conflict with a container of someone else's.
func (w *world) blockedByForeign() bool {
	rep := w.lastPass
	if rep == nil || rep.Result == nil {
		return false
	}
	blocked := false
	for _, o := range rep.Result.Outcomes {
		switch {
		case o.Kind == reconcile.Keep && o.Err == nil:
		case o.Kind == reconcile.Conflict && w.foreign[o.Name+spec.AsideSuffix] != "":
			blocked = true
		default:
			return false
		}
	}
	return blocked
}
