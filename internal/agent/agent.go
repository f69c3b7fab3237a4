// Package agent is meshhost's host agent loop: it takes the machine's
// declaration, serves its roster through the resolver, lets the migration
// gate decide each container's name mode, and reconciles the runtime, on
// every change and periodically.
//
// The order inside a pass is the design's: the roster reaches the resolver
// first (no container touched), the gate proves the resolver reachable
// before any container stops getting the copy, and only then does the
// reconciler act, within its budget. What a pass does is computed by
// package pass, which `meshhost plan` calls too; the agent then acts on it.
//
// The agent owns its state directory (package statedir names every file in
// it) and its journal: it records each declaration it applies and each pass
// that did something, with the declaration's generation.
//
// # How a roster change travels
//
// One change, from where it arrives to each part that owns a copy of the
// roster; each applies it once, each reader follows the Source's Changes
// with one cursor of its own:
//
//	push, file, directory (Offer) or NATS (Put, PutRosterDelta)
//	  v
//	declsource.Source: admits it (package admit), applies it to the declared
//	  |  roster in place, records a Change (Seq, the delta, its undo), signals
//	  |  Changed. Head() is the declaration without names; ChangesSince(cursor).
//	  +--> declSaver.save (cursor savedSeq; declsave.go): the delta appended to
//	  |      declaration.log, or the document written whole (declaration.json)
//	  +--> rosterInForce (cursor declSeq; inforce.go), from a pass's step 1 or at
//	  |      once from Run's roster loop: the Changes composed into pending;
//	  |      pass.RosterChange (the guard) lets it through or holds it; then
//	  |      Resolver.Apply(delta): the resolver swaps its table and appends
//	  |      the delta to its roster.json.log (embedded: in State; a service: in
//	  |      its own); then the agent's own roster, the guard's, takes it in
//	  |      place, and SetServed tells the Source which generation is served
//	  +--> the journal (cursor journalSeq, in a pass): a roster entry with the
//	         change's diff, or the declaration's entry with it
//
// A pass renders copy-mode containers with a snapshot of the roster in
// force (rosterInForce.snapshot), so the roster loop never waits for a
// pass.
//
// # Glossary
//
// Generations:
//   - declaration generation: spec.Declaration.Generation, the controller's
//     number for the whole declaration; never goes back.
//   - roster generation: spec.Roster.Generation, the roster's own number; it
//     moves with or without its declaration's (a NATS roster change).
//   - served generation: the roster generation the resolver serves
//     (Source.SetServed; Report.RosterGeneration).
//   - accepted roster generation: the one the operator let shrink past the
//     roster guard (roster-accept; AcceptRoster).
//   - approved declaration generation: the one the operator let past the
//     blast-radius hold (approved; ApproveDeclaration).
//   - savedGen, baseGen: the declaration generation last saved, and that of
//     declaration.json (declSaver).
//   - applied: the declaration generation last journalled (Agent).
//   - olderLogged: an older declared roster generation already warned about.
//
// Cursors (the Source's Change.Seq: 1 for the first declaration taken after
// New; Head.Seq is the last one the declaration in force includes):
//   - savedSeq: the last Change saved in State (declSaver).
//   - declSeq: the last Change composed into pending (rosterInForce).
//   - journalSeq: the last Change journalled (Agent).
//
// Holds:
//   - roster hold: the roster guard holds a change that drops too many names;
//     the served roster stays (roster-held; released by meshhost roster
//     accept or a roster that no longer drops them).
//   - blast-radius hold: a plan that would replace and remove more than
//     Config.HoldAbove containers is not applied (meshhost approve).
//   - freeze: the machine is frozen (meshhost freeze); no container is
//     created, replaced or removed.
//
// State files (package statedir):
//   - declaration.json, declaration.log: the declaration last applied,
//     whole, and the deltas since.
//   - roster.json, roster.json.log: the embedded resolver's saved roster.
//   - resolver: where the agent's resolver is (embedded, or unix:PATH).
//   - roster-held, roster-accept: the roster hold, and the operator's accept.
//   - approved, frozen: the operator's approval, and the freeze.
//   - status.json: what the last pass found (meshhost status, plan).
//   - reconciler.json: the reconciler's budget and adoptions.
//   - migrations.json (and .lock): the migration gate's state.
//   - journal/: the journal.
//   - push.sock: the controller's push socket, by default.
//   - hash.key: the machine's key for the keyed hashes of values.
//   - agent.lock: held by the running agent.
//   - *.corrupt-*: logs set aside, damaged (statedir.Dir.SetAside).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/sdnotify"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Resolver is what the agent needs of the mesh's resolver: to put a roster
// change in force (Apply, generation-checked: a change of k names costs
// the resolver k), to say which roster is in force (RosterContext, an
// error when it cannot be read; Roster, nil then), and whether it serves
// one at all (Serving). An in-process *resolver.Server has it, and so has
// a *control.Client of a resolver running as its own service. Where the
// resolver listens and whom it answers goes through the Exposer, which
// takes the resolver as a migrations.Resolver.
//
// New records in the state directory where the resolver is: the control
// socket of a *control.Client, or else the agent's own process, whose
// resolver saves its roster at statedir.Dir.Roster (ResolverAt,
// ServedRoster).
type Resolver interface {
	Apply(d *spec.RosterDelta) error
	Roster() *spec.Roster
	RosterContext(ctx context.Context) (*spec.Roster, error)
	Serving() bool
}

// Networks reports the runtime's networks, in migrations' terms.
type Networks interface {
	Networks(ctx context.Context) ([]migrations.Network, error)
}

// Prober proves the resolver reachable from networks; *migrations.Runner.
type Prober interface {
	Probe(ctx context.Context, nets []migrations.Network, prefer map[string]migrations.Strategy) []migrations.Result
}

// Exposer makes the resolver reachable from networks, and takes that back
// from networks that are gone; *migrations.Exposer (the one the agent's
// Runner shares).
type Exposer interface {
	Expose(n migrations.Network, s migrations.Strategy) (spec.DNSConfig, error)
	Retain(nets []migrations.Network)
}

// Config is what an Agent runs with. Runtime, Resolver, Gate, Source,
// Reconciler and State are required.
type Config struct {
	Runtime    reconcile.Runtime
	Reconciler *reconcile.Reconciler
	Resolver   Resolver
	Gate       *migrations.Gate
	Source     *declsource.Source
	// Networks lists the runtime's networks. Nil (the in-memory runtime):
	// the gate never opens, and every container keeps its copy.
	Networks Networks
	// Exposer exposes the resolver, every pass, on the networks with a
	// proven strategy, and takes it back from networks gone. Nil: none.
	Exposer Exposer
	// NewProber returns the prober for a roster zone, once a roster with a
	// zone is in force. Nil: never probe.
	NewProber func(zone string) (Prober, error)
	// Journal records each declaration applied and each pass that did
	// something. Nil: none.
	Journal *journal.Journal
	// State is the agent's state directory (glossary: state files).
	State statedir.Dir
	// Saved is what LoadSaved read from State when the Source took it as
	// its initial declaration: saving goes on appending where the last run
	// left off. Nil: the first change is saved whole.
	Saved *Saved
	// Interval between periodic passes. Default 30s.
	Interval time.Duration
	// Guard is the roster guard's policy (glossary: roster hold).
	Guard rosterguard.Policy
	// HoldAbove is the blast-radius hold's threshold: containers a plan
	// may replace and remove without the operator's approval; 0 never
	// holds (glossary: blast-radius hold).
	HoldAbove int
	// AfterPass runs after every pass with its report. Nil: none.
	AfterPass func(*Report)
	// SourceHealth says why the declaration source is not healthy, or nil;
	// Readiness reports it. Nil: always healthy.
	SourceHealth func() error
	Logger       *slog.Logger
	// Registerer receives the agent's metrics. Nil registers none.
	Registerer prometheus.Registerer
	// ResolverAlive reports, without blocking, whether the resolver
	// answers. Nil: it runs in this process.
	ResolverAlive func() error
	// Asserted runs once, after the first pass that exposed the resolver
	// on every proven network without an error (control.Client.Settle).
	// Nil: none.
	Asserted func() error
	// RetryMin is the wait before the pass after a failed one, doubling
	// with each failure in a row up to Interval. Default 1s.
	RetryMin time.Duration
}

// Agent runs passes. Its methods are safe for concurrent use. Each part
// owns its lock: the saver and the roster in force their own, mu the
// rest.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	status  atomic.Pointer[status] // the last pass's, read without waiting for a pass
	passes  atomic.Uint64          // passes begun: the last one's number (the pass log field)
	saver   *declSaver             // the declaration saved (declsave.go)
	roster  *rosterInForce         // the roster in force (inforce.go)

	// mu serializes passes and guards the fields below (functions named
	// ...Locked).
	mu         sync.Mutex
	prober     Prober
	proberErr  error             // why no prober could be made, as last logged
	applied    uint64            // journal cursor: the declaration generation last journalled
	journalSeq uint64            // journal cursor: the Source's Change last journalled
	complete   bool              // the declaration applied last was applied whole (logged "declaration applied")
	renders    pass.Cache        // the last pass's renderings
	exposeErrs map[string]string // why the resolver is not exposed, by network, as last logged
	asserted   bool              // Config.Asserted ran
	hold       *pass.Hold        // the last pass's blast-radius hold, nil for none
	holds      []journal.Hold    // the holds in force as journalled (read from the journal at start)
	frozen     bool              // the last pass found the machine frozen
	// statusWritten is what status.json holds (nil: not read yet);
	// statusErr why it could not be written last, as logged.
	statusWritten []byte
	statusErr     string
}

// status is what a pass publishes when it ends.
type status struct {
	at     time.Time // when the last pass ended
	err    error     // why it failed, or nil
	report *Report   // the last pass that got as far as a report
	// exposed says why the resolver is not exposed everywhere the gate
	// says, nil when it is.
	exposed error
}

// Report is what one pass did.
type Report struct {
	Generation       uint64 `json:"generation"`
	RosterGeneration uint64 `json:"roster_generation"`
	RosterHeld       string `json:"roster_held,omitempty"`
	// Held is the declaration's blast-radius hold, when its plan would
	// replace more than Config.HoldAbove containers: unless approved,
	// nothing of the plan was applied.
	Held *pass.Hold `json:"held,omitempty"`
	// Frozen: the machine is frozen (meshhost freeze); nothing of the plan
	// was applied.
	Frozen   bool              `json:"frozen,omitempty"`
	Modes    map[string]string `json:"modes"`
	Probed   []string          `json:"probed,omitempty"`
	Result   *reconcile.Result `json:"-"`
	Duration time.Duration     `json:"-"`
	// rosterHold is the roster change the guard holds, nil when none.
	rosterHold *RosterHold
	// DurationSeconds is Duration, in /v1/report's JSON.
	DurationSeconds float64 `json:"duration_seconds"`
}

// New returns an Agent.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Runtime == nil, cfg.Reconciler == nil, cfg.Resolver == nil, cfg.Gate == nil, cfg.Source == nil:
		return nil, errors.New("agent: Runtime, Reconciler, Resolver, Gate and Source are required")
	case cfg.State.Path() == "":
		return nil, errors.New("agent: State is required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer, cfg.State, time.Now())
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("component", "agent"), metrics: m,
		saver: &declSaver{state: cfg.State, source: cfg.Source, saved: cfg.Saved}}
	a.roster = &rosterInForce{resolver: cfg.Resolver, source: cfg.Source, guard: cfg.Guard, state: cfg.State, log: a.log, heldGauge: m.rosterHeld}
	a.status.Store(&status{})
	a.recordResolverAt()
	if cfg.Journal != nil {
		// One pass number everywhere: the log's pass= goes on from the
		// journal's, so a restart never numbers a pass anew.
		a.passes.Store(cfg.Journal.LastPass())
		if passes, err := cfg.Journal.Passes(); err == nil {
			a.holds = journal.HoldsInForce(passes)
		}
	}
	return a, nil
}

// Run passes on every declaration change and every Interval until ctx
// ends. After a failed pass (podman's API or the resolver down, say) the
// next one comes sooner: RetryMin, doubling with each failure in a row up
// to Interval. Run never returns because a pass failed, and never stops a
// container on its way out.
//
// A declaration change reaches the resolver at once: Run's roster loop
// puts the roster change in force as soon as the Source takes it, even
// while a pass is busy with containers (a replacement can take minutes),
// and then asks for a pass.
func (a *Agent) Run(ctx context.Context) error {
	wait := a.cfg.Interval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	failures := 0
	changed := make(chan struct{}, 1)
	loop := make(chan struct{})
	go func() {
		defer close(loop)
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.cfg.Source.Changed():
			}
			if err := a.rosterNow(); err != nil && ctx.Err() == nil {
				a.log.Error("putting the declared roster in force failed; the next pass retries", "err", err)
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	defer func() { <-loop }()
	for {
		if _, err := a.Pass(ctx); err != nil && ctx.Err() == nil {
			failures++
			wait = RetryWait(a.cfg.RetryMin, a.cfg.Interval, failures)
			a.log.Error("pass failed; retrying", "pass", a.passes.Load(), "retry_in_seconds", wait.Seconds(), "failures_in_a_row", failures, "err", err)
		} else {
			failures, wait = 0, a.cfg.Interval
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-timer.C:
		}
	}
}

// RetryWait is the wait after the n-th failure in a row: min doubled n-1
// times, at most max.
func RetryWait(min, max time.Duration, n int) time.Duration {
	w := min
	for i := 1; i < n && w < max; i++ {
		w *= 2
	}
	return time.Duration(math.Min(float64(w), float64(max)))
}

// rosterNow puts the declared roster in force now, as a pass's step 1
// does, without waiting for a pass. A roster served but not saved is
// reported by the next pass.
func (a *Agent) rosterNow() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = a.recovered(context.Background(), "putting the roster in force", v)
		}
	}()
	head, ok := a.cfg.Source.Head()
	if !ok {
		return nil
	}
	// Saved first, as in a pass: what cannot be saved is not acted on.
	if err := a.saver.save(head); err != nil {
		return err
	}
	return a.roster.now(head)
}

// Pass runs one pass now.
//
// A panic inside the pass (a bug) is recovered: logged with its stack,
// counted (meshhost_agent_pass_panics_total), and returned as the pass's
// error. What was in force stays (the resolver swaps a roster whole or not
// at all; the reconciler's actions stop where they were, each crash-safe),
// the agent keeps serving, and the next pass tries again, instead of a
// process that dies at every start on a declaration it saved.
//
// Every line the pass logs, the reconciler's among them, names it: the
// pass's number (field pass), and its declaration's generation and roster's
// generation once known, are in its context (logging.WithAttrs). Run logs
// a failed pass, with its number.
func (a *Agent) Pass(ctx context.Context) (rep *Report, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	n := a.passes.Add(1)
	a.metrics.passNumber.Set(float64(n))
	ctx = logging.WithAttrs(ctx, "pass", n)
	defer func() {
		if v := recover(); v != nil {
			err = a.recovered(ctx, "the pass", v)
		}
		a.endPassLocked(start, rep, err)
	}()
	a.roster.readOnce(ctx)
	head, ok := a.cfg.Source.Head()
	if !ok {
		return nil, nil // nothing declared yet: serve the saved roster, touch nothing
	}
	decl := head.Declaration // without its roster's names: the roster is a.roster's
	rep = &Report{Generation: decl.Generation, Modes: map[string]string{}}
	ctx = logging.WithAttrs(ctx, "declaration_generation", decl.Generation)

	// 0. The declaration in force is saved before anything acts on it, so
	// an agent killed mid-pass resumes toward it, not toward an older one
	// (which would remove the containers the newer one added), and one
	// that cannot be saved (a full disk) changes nothing, DNS included.
	if err := a.saver.save(head); err != nil {
		return rep, err
	}

	// 1. The roster reaches the resolver first; no container is touched.
	zones, unsaved, err := a.roster.put(ctx, head, rep)
	if err != nil {
		return rep, err
	}
	ctx = logging.WithAttrs(ctx, "roster_generation", rep.RosterGeneration)

	// 2. The gate: the declaration's flag and the networks its containers
	// use (under auto, only those hold the switch back; every network
	// the runtime has is still observed and probed), then networks,
	// probes, modes. Zones are never changed in place: a roster change
	// replaces the list.
	if err := a.cfg.Gate.Declare(decl); err != nil {
		return rep, fmt.Errorf("setting the migration flag: %w", err)
	}
	if err := a.gateLocked(ctx, zones, rep); err != nil {
		return rep, err
	}
	observed, err := a.cfg.Runtime.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing containers: %w", err)
	}

	// 3. What the pass does (package pass, as `meshhost plan` computes
	// it), then doing it.
	// Copy-mode containers are rendered with a snapshot of the roster in
	// force, taken when the first of them is rendered (the roster loop may
	// have moved it on since step 1, in place); resolve mode reads none,
	// so a roster change never waits for a pass.
	c, err := pass.Compute(ctx, pass.Input{
		Declaration: decl, Snapshot: a.roster.snapshot, Gate: a.cfg.Gate, Observed: observed, Planner: a.cfg.Reconciler,
		Cache: &a.renders, HoldAbove: a.cfg.HoldAbove, Approved: func() uint64 { return ApprovedDeclaration(a.cfg.State) },
	})
	if err != nil {
		return rep, fmt.Errorf("reconciling: %w", err)
	}
	for name, m := range c.Modes {
		rep.Modes[name] = string(m.Names)
	}
	rep.Held = c.Hold
	freeze, ferr := Frozen(a.cfg.State)
	rep.Frozen = freeze != nil
	a.controlsLocked(decl, c.Hold, freeze, ferr)
	if rep.Frozen || c.Hold.Held() {
		// Nothing of the plan is applied: the containers stay as they
		// are. The roster is in force already, and the next pass judges
		// again (an approval, an unfreeze, a newer declaration).
		a.recordPassLocked(ctx, n, start, decl.Generation, nil, a.holdsLocked(rep, freeze))
		a.recordRostersLocked(ctx, head)
		return rep, unsaved
	}
	res, err := a.cfg.Reconciler.Apply(ctx, c.Plan)
	rep.Result = res
	a.recordPassLocked(ctx, n, start, decl.Generation, res, a.holdsLocked(rep, freeze))
	if err != nil {
		return rep, fmt.Errorf("reconciling: %w", err)
	}

	// 4. Remember what was applied.
	a.recordDeclarationLocked(ctx, head, res, rep.rosterHold)
	a.metrics.declaration.Set(float64(decl.Generation))
	return rep, errors.Join(unsaved, res.Err(), a.saver.compact())
}

// endPassLocked records the end of a pass that began at start: its
// status (health's), its report's duration, what AfterPass says, and
// the pass metrics.
func (a *Agent) endPassLocked(start time.Time, rep *Report, err error) {
	syncs.AssertLocked(&a.mu)
	st := &status{at: time.Now(), err: err, report: a.status.Load().report, exposed: a.exposedLocked()}
	if rep != nil {
		rep.Duration = time.Since(start)
		rep.DurationSeconds = rep.Duration.Seconds()
		st.report = rep
		if a.cfg.AfterPass != nil {
			// The pass's own result stands; health says what failed after it.
			if perr := a.afterPass(rep); perr != nil {
				st.err = errors.Join(st.err, perr)
			}
		}
	}
	// A pass whose state could not be saved after it has not succeeded:
	// the same verdict as Health's.
	a.metrics.pass(st.err, time.Since(start), time.Now())
	a.status.Store(st)
}

// recovered logs and counts a panic the agent recovered from in what, and
// returns it as an error.
func (a *Agent) recovered(ctx context.Context, what string, v any) error {
	a.metrics.panics.Inc()
	a.log.ErrorContext(ctx, what+" panicked; what was in force stays, and the next pass tries again", "panic", v, "stack", string(debug.Stack()))
	return fmt.Errorf("%s panicked: %v", what, v)
}

// afterPass runs Config.AfterPass, and returns a panic in it as an error.
func (a *Agent) afterPass(rep *Report) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = a.recovered(context.Background(), "saving the pass's state", v)
		}
	}()
	a.cfg.AfterPass(rep)
	return nil
}

// recordDeclarationLocked journals the declaration in force the first
// time a pass applied it, with its roster's change from the roster
// recorded before (from the Source's Changes: what changed, not the
// roster); before it, the roster changes that came alone
// (recordRostersLocked).
func (a *Agent) recordDeclarationLocked(ctx context.Context, head declsource.Head, res *reconcile.Result, rosterHold *RosterHold) {
	syncs.AssertLocked(&a.mu)
	decl := head.Declaration
	changes, ok := a.recordRostersLocked(ctx, head)
	if left := pending(res); left.any() {
		// Said at every pass that leaves some of the plan for later, never
		// "applied": a pass whose every action the budget deferred did
		// nothing.
		a.log.InfoContext(ctx, "declaration in force in part: later passes apply the rest", "declaration_generation", decl.Generation,
			"done", left.done, "deferred", left.deferred, "frozen", left.frozen, "failed", left.failed)
	}
	if decl.Generation == a.applied {
		if !a.complete && !pending(res).any() {
			a.complete = true
			a.log.InfoContext(ctx, "declaration applied", "declaration_generation", decl.Generation, "origin", head.Origin)
		}
		return
	}
	if a.cfg.Journal != nil {
		diff := journal.Diff{To: decl.Roster.Generation, Unknown: true}
		if ok && (a.applied != 0 || len(changes) > 0) {
			if do, undo, err := compose(changes); err == nil && do != nil {
				diff = journal.DiffOf(do, undo)
			} else if err == nil {
				diff = journal.Diff{From: decl.Roster.Generation, To: decl.Roster.Generation}
			}
		}
		var served uint64 // the roster the guard keeps serving, when it holds this one
		if h := rosterHold; h != nil && h.Newest == decl.Roster.Generation {
			served = h.Served
		}
		if _, err := a.cfg.Journal.RecordDeclarationServing(decl, diff, time.Now(), served); err != nil && !errors.Is(err, journal.ErrOlderGeneration) {
			// Not applied as far as the journal goes: the next pass
			// records it again (a full disk freed), or the history
			// would miss it for good, and rollback with it.
			a.log.WarnContext(ctx, "recording the declaration in the journal; the next pass retries", "err", err)
			return
		}
	}
	a.applied, a.journalSeq = decl.Generation, head.Seq
	a.complete = !pending(res).any()
	if a.complete {
		a.log.InfoContext(ctx, "declaration applied", "declaration_generation", decl.Generation, "origin", head.Origin)
	}
}

// left counts the actions of a pass: done, and left for a later pass.
type left struct{ done, deferred, frozen, failed int }

func (l left) any() bool { return l.deferred+l.frozen+l.failed > 0 }

// pending counts res's actions (Keep aside) by what became of them.
func pending(res *reconcile.Result) left {
	var l left
	if res == nil {
		return l
	}
	for _, o := range res.Outcomes {
		switch {
		case o.Err != nil:
			l.failed++
		case o.Deferred:
			l.deferred++
		case o.Frozen:
			l.frozen++
		case o.Kind != reconcile.Keep:
			l.done++
		}
	}
	return l
}

// recordRostersLocked journals the roster changes that came alone since
// the last Change journalled, up to head: those that kept the generation
// of the declaration journalled last (a NATS roster change, a roster put
// with its declaration's generation). Each is a roster entry of its own,
// named by its roster generation and holding its diff, which costs the
// names it changed. A pass records them whether or not it applies its
// plan (held, frozen): the roster is in force either way. It returns the
// Changes after them, and false when the Source no longer has them all
// (then, when the declaration is the one journalled, the roster's move is
// journalled as not known).
func (a *Agent) recordRostersLocked(ctx context.Context, head declsource.Head) ([]declsource.Change, bool) {
	syncs.AssertLocked(&a.mu)
	changes, ok := changesThrough(a.cfg.Source, a.journalSeq, head)
	if a.cfg.Journal == nil {
		return changes, ok
	}
	gen := a.applied
	if gen == 0 {
		// After a start: the declaration the journal holds last goes on
		// (the one saved), and its roster may move before a pass records
		// anything.
		if last, any, err := a.cfg.Journal.LastGeneration(); err == nil && any && last == head.Declaration.Generation {
			gen = last
		}
	}
	if gen == 0 {
		return changes, ok
	}
	record := func(diff journal.Diff) bool {
		_, err := a.cfg.Journal.RecordRoster(head.Declaration.Machine, gen, diff, time.Now())
		if err != nil && !errors.Is(err, journal.ErrOlderGeneration) {
			a.log.WarnContext(ctx, "recording the roster in the journal", "roster_generation", diff.To, "err", err)
			return false
		}
		return true
	}
	if !ok {
		if head.Declaration.Generation == gen && record(journal.Diff{To: head.Declaration.Roster.Generation, Unknown: true}) {
			a.journalSeq = head.Seq
		}
		return nil, false
	}
	n := 0
	for ; n < len(changes) && changes[n].Generation == gen; n++ {
		c := changes[n]
		if c.Roster == nil || c.Undo == nil || !record(journal.DiffOf(c.Roster, c.Undo)) {
			break // the next pass tries again
		}
		a.journalSeq = c.Seq
	}
	return changes[n:], true
}

// changesThrough returns the Source's Changes after seq, up to the one
// head includes (a later one is the next pass's), and false when the
// Source no longer has them all.
func changesThrough(src *declsource.Source, seq uint64, head declsource.Head) ([]declsource.Change, bool) {
	if seq > head.Seq {
		return nil, false
	}
	changes, ok := src.ChangesSince(seq)
	for len(changes) > 0 && changes[len(changes)-1].Seq > head.Seq {
		changes = changes[:len(changes)-1]
	}
	return changes, ok
}

// compose returns the roster change that changes make, in order, and the
// one that undoes it; nil for no change.
func compose(changes []declsource.Change) (do, undo *spec.RosterDelta, err error) {
	for _, c := range changes {
		if do == nil {
			do, undo = c.Roster, c.Undo
			continue
		}
		if do, err = do.Then(c.Roster); err != nil {
			return nil, nil, err
		}
		if undo, err = c.Undo.Then(undo); err != nil {
			return nil, nil, err
		}
	}
	return do, undo, nil
}

// AcceptedRoster returns the roster generation the operator let shrink past
// the guard (AcceptRoster), 0 when none.
func AcceptedRoster(dir statedir.Dir) uint64 {
	data, err := os.ReadFile(dir.RosterAccept())
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

func (a *Agent) gateLocked(ctx context.Context, zones []string, rep *Report) error {
	syncs.AssertLocked(&a.mu)
	if a.cfg.Networks == nil {
		return nil
	}
	nets, err := a.cfg.Networks.Networks(ctx)
	if err != nil {
		return fmt.Errorf("listing networks: %w", err)
	}
	// Podman lists no host network: it is one where a declared container
	// is on it (Gate.Declare ran this pass), probed and switched as any.
	nets = migrations.WithHost(nets, a.cfg.Gate.State().Used)
	if _, err := a.cfg.Gate.Observe(nets); err != nil {
		return fmt.Errorf("observing networks: %w", err)
	}
	nameNetworks(a.cfg.Resolver, nets)
	prefer := a.cfg.Gate.Strategies()
	// Before, and whatever becomes of, the prober: containers already in
	// resolve mode need the resolver whether or not more networks can be
	// probed (issue 7: an agent restarted with a bad probe configuration, or
	// whose probe image failed to import, left them pointing at addresses
	// where nothing listened).
	if a.exposeLocked(ctx, nets, prefer) && !a.asserted && a.cfg.Asserted != nil {
		if err := a.cfg.Asserted(); err != nil {
			a.log.WarnContext(ctx, "the resolver could not drop what the previous agent exposed; next pass retries", "err", err)
		} else {
			a.asserted = true
			a.log.InfoContext(ctx, "the resolver's exposure is this agent's now (what an earlier agent exposed and this one did not is dropped)")
		}
	}
	if err := a.ensureProberLocked(zones); err != nil {
		if a.proberErr == nil || a.proberErr.Error() != err.Error() {
			a.log.WarnContext(ctx, "cannot probe the networks; every container keeps its copied names until a probe passes", "err", err)
		}
		a.proberErr = err
		return nil
	}
	a.proberErr = nil
	if a.prober == nil {
		return nil
	}
	byName := map[string]migrations.Network{}
	for _, n := range nets {
		byName[n.Name] = n
	}
	var need []migrations.Network
	for _, name := range a.cfg.Gate.NeedsProbe() {
		if n, ok := byName[name]; ok {
			need = append(need, n)
		}
	}
	if len(need) == 0 {
		return nil
	}
	results := a.prober.Probe(ctx, need, prefer)
	for _, r := range results {
		rep.Probed = append(rep.Probed, r.Network)
		level := slog.LevelInfo
		if !r.Pass {
			level = slog.LevelWarn
		}
		a.log.Log(ctx, level, "probe", "network", r.Network, "passed", r.Pass, "strategy", r.Strategy, "reason", r.Reason, "duration_seconds", r.Latency.Seconds())
	}
	if err := a.cfg.Gate.Record(results); err != nil {
		return fmt.Errorf("recording probe results: %w", err)
	}
	return nil
}

// exposeLocked makes the resolver's exposure follow the runtime's networks nets,
// as listed this pass: networks gone give back their listeners, allowed
// subnets and forwards (Exposer.Retain), and every network with a proven
// strategy (prefer; those whose containers are in resolve mode among them)
// gets the resolver where its strategy says. Exposing what is exposed
// already changes nothing, and doing it every pass serves a network
// recreated under its name, or a node-local address assigned late,
// without a restart. A failure is logged when it changes; the pass goes
// on (the network's next probe fails, and the gate acts on that).
//
// It reports whether every proven network is exposed.
func (a *Agent) exposeLocked(ctx context.Context, nets []migrations.Network, prefer map[string]migrations.Strategy) bool {
	syncs.AssertLocked(&a.mu)
	if a.cfg.Exposer == nil {
		return true
	}
	a.cfg.Exposer.Retain(nets)
	failed := map[string]string{}
	for _, n := range nets {
		s, ok := prefer[n.Name]
		if !ok {
			continue
		}
		if _, err := a.cfg.Exposer.Expose(n, s); err != nil {
			failed[n.Name] = err.Error()
			if a.exposeErrs[n.Name] != err.Error() {
				a.log.ErrorContext(ctx, "exposing the resolver on a proven network", "network", n.Name, "strategy", s, "err", err)
			}
		}
	}
	a.exposeErrs = failed
	return len(failed) == 0
}

// exposedLocked says why the resolver is not exposed on every network the
// gate has proven, nil when it is.
func (a *Agent) exposedLocked() error {
	syncs.AssertLocked(&a.mu)
	if len(a.exposeErrs) == 0 {
		return nil
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(a.exposeErrs)) {
		errs = append(errs, fmt.Errorf("network %s: %s", n, a.exposeErrs[n]))
	}
	return fmt.Errorf("the resolver is not exposed where the gate says: %w", errors.Join(errs...))
}

func (a *Agent) ensureProberLocked(zones []string) error {
	syncs.AssertLocked(&a.mu)
	if a.cfg.NewProber == nil || a.prober != nil {
		return nil
	}
	if len(zones) == 0 {
		return errors.New("the roster has no zone to ask the canary under")
	}
	p, err := a.cfg.NewProber(zones[0])
	if err != nil {
		return err
	}
	a.prober = p
	return nil
}

// Liveness says why the agent is not alive, nil when it is: the process
// answers (it is answering this), and so does the resolver. It never waits
// for a pass, nor on a socket.
func (a *Agent) Liveness() error {
	if a.cfg.ResolverAlive != nil {
		if err := a.cfg.ResolverAlive(); err != nil {
			return fmt.Errorf("the resolver does not answer: %w", err)
		}
	}
	return nil
}

// Readiness says why the agent is not ready, nil when it is: the resolver
// serves a roster and is exposed where the gate says, and the last pass
// succeeded recently. It never waits for a pass in progress: it reads what
// the last one published.
func (a *Agent) Readiness() error {
	if err := a.Liveness(); err != nil {
		return err
	}
	if !a.cfg.Resolver.Serving() {
		return errors.New("the resolver has no roster yet")
	}
	if a.cfg.SourceHealth != nil {
		if err := a.cfg.SourceHealth(); err != nil {
			return fmt.Errorf("declaration source: %w", err)
		}
	}
	st := a.status.Load()
	if st.at.IsZero() {
		return errors.New("no pass has ended yet")
	}
	if st.err != nil {
		return fmt.Errorf("last pass failed: %w", st.err)
	}
	if st.exposed != nil {
		return st.exposed
	}
	if time.Since(st.at) > 3*a.cfg.Interval+time.Minute {
		return fmt.Errorf("no pass since %s", st.at.Format(time.RFC3339))
	}
	return nil
}

// Health is Readiness, under its old name.
func (a *Agent) Health() error { return a.Readiness() }

// LastReport returns what the last pass did. It never waits for a pass in
// progress.
func (a *Agent) LastReport() *Report { return a.status.Load().report }

// Handler serves /livez (Liveness), /readyz (Readiness) and /healthz (its
// old name), each 200 "ok" or 503 saying why not, and /v1/report
// (LastReport as JSON). None waits for a pass in progress.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	probe := func(check func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.Handle("/livez", probe(a.Liveness))
	mux.Handle("/readyz", probe(a.Readiness))
	mux.Handle("/healthz", probe(a.Readiness))
	mux.HandleFunc("/v1/report", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.LastReport())
	})
	return mux
}

// Notify tells systemd how the agent is (package sdnotify; nothing without
// NOTIFY_SOCKET) until ctx ends: READY=1 once its resolver answers
// (Liveness), then WATCHDOG=1, and STOPPING=1 at the end.
//
// The watchdog follows this process alone, from a loop of its own: never
// a pass (which may wait minutes on a health-gated start), never the
// resolver. A resolver down for longer than WatchdogSec must not get the
// agent killed: restarted, it would wait for the resolver before READY=1
// and be killed again, in a loop, while it could have fed the resolver
// the moment it came back. /livez says the resolver is down.
func (a *Agent) Notify(ctx context.Context) { Notify(ctx, a.log, a.Liveness) }

// Notify is Agent.Notify with ready in the place of Liveness, for the
// agent command while it has no Agent yet (podman's API down at start):
// READY=1 once ready returns nil, then WATCHDOG=1 for as long as this
// process runs.
func Notify(ctx context.Context, log *slog.Logger, ready func() error) {
	if !sdnotify.Enabled() {
		return
	}
	defer sdnotify.Notify(sdnotify.Stopping)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ready() != nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	if err := sdnotify.Notify(sdnotify.Ready + "\nSTATUS=the resolver answers"); err != nil {
		log.Warn("telling systemd the agent is ready", "err", err)
	}
	tick.Stop()
	// This loop running is what the watchdog checks: nothing else can
	// hold it back.
	sdnotify.WatchdogLoop(ctx, log, func() error { return nil })
	<-ctx.Done() // WatchdogLoop returns at once when the unit sets no watchdog
}

// writeAtomic writes a state file whole or not at all.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
