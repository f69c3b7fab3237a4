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
	"github.com/meshhost/meshhost/internal/agent/pass"
	"github.com/meshhost/meshhost/internal/agent/rosterguard"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/sdnotify"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// Resolver is what the agent needs of the mesh's resolver: to put a roster
// in force (Update, generation-checked), to say which one is (Roster), and
// whether it serves one at all (Serving). An in-process *resolver.Server
// has it; so can a client of a resolver running as its own service. Where
// the resolver listens and whom it answers goes through the Exposer, which
// takes the resolver as a migrations.Resolver.
type Resolver interface {
	Update(r *spec.Roster) error
	Roster() *spec.Roster
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
	// Networks and Prober may be nil (the in-memory runtime): the gate then
	// never opens, and every container keeps its copy.
	Networks Networks
	// Exposer, when set with Networks, exposes the resolver on every pass
	// on the networks with a proven strategy (Gate.Strategies), whether or
	// not a prober can be made, and takes it back from networks gone.
	Exposer Exposer
	// NewProber returns the prober for a roster zone; called once a roster
	// with a zone is in force. Nil: never probe.
	NewProber func(zone string) (Prober, error)
	// Journal, when set, records each declaration applied and each pass
	// that did something.
	Journal *journal.Journal
	// State is the agent's state directory: the last declaration applied
	// and the roster generation the operator accepted are read and written
	// there.
	State statedir.Dir
	// SavedGeneration is the generation of the declaration State holds
	// already (LoadDeclaration's, when the Source took it), so that a
	// restart does not write the same declaration again: on a full disk
	// that write would fail every pass.
	SavedGeneration uint64
	// Interval between periodic passes. Default 30s.
	Interval time.Duration
	Guard    rosterguard.Policy
	// HoldAbove holds a declaration whose plan would replace more than this
	// many containers until the operator approves it (meshhost approve);
	// 0 never holds. The agent command's --hold-above (DefaultHoldAbove).
	HoldAbove int
	// AfterPass, when set, runs after every pass with its report (the agent
	// command persists the reconciler's budget and adoptions there).
	AfterPass func(*Report)
	// SourceHealth, when set, says why the declaration source is not
	// healthy (a NATS server cut off longer than the source's patience),
	// or nil; Health reports it. The roster in force keeps serving.
	SourceHealth func() error
	Logger       *slog.Logger
	// Registerer receives the agent's metrics. Nil registers none.
	Registerer prometheus.Registerer

	// ResolverAlive reports, without blocking, whether the resolver
	// answers (control.Client.Alive, for a resolver of its own). Nil: it
	// runs in this process, and answers while the process does.
	ResolverAlive func() error
	// Asserted runs once, after the first pass that exposed the resolver
	// on every network the gate has proven, without an error: a resolver
	// that outlived the previous agent then drops what that agent had
	// exposed and this one did not (control.Client.Settle). Until then it
	// keeps serving all of it.
	Asserted func() error
	// RetryMin is the wait before the pass after a failed one; it doubles
	// with each failure in a row, up to Interval. Default 1s.
	RetryMin time.Duration
}

// Agent runs passes. Its methods are safe for concurrent use.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	// status is what the last pass published, for Health and LastReport,
	// which never wait for a pass in progress.
	status atomic.Pointer[status]

	// mu serializes passes, and guards the fields below: a pass holds it
	// from start to end, so only functions named ...Locked touch them.
	mu          sync.Mutex
	passes      atomic.Uint64 // passes begun: the last one's number (the pass log field)
	prober      Prober
	proberErr   error        // why no prober could be made; logged when it changes
	applied     uint64       // declaration generation last recorded in the journal
	saved       uint64       // declaration generation last saved in State
	heldRoster  error        // why the declared roster is held, or nil
	inForce     *spec.Roster // the roster the resolver serves; nil until the first pass
	olderLogged uint64       // an older declared roster generation already warned about
	// exposeErrs says, by network, why the resolver could not be exposed
	// on it; logged when it changes.
	exposeErrs map[string]string
	asserted   bool // Config.Asserted ran
	// hold is the last pass's blast-radius hold (nil: none); frozen whether
	// the last pass found the machine frozen. Logged when they change.
	hold   *pass.Hold
	frozen bool
	// statusWritten is what status.json holds (nil: not read yet);
	// statusErr why it could not be written last, logged when it changes.
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
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("component", "agent"), metrics: m, saved: cfg.SavedGeneration}
	a.status.Store(&status{})
	return a, nil
}

// LoadDeclaration returns the declaration saved by the last run, or nil.
func LoadDeclaration(dir statedir.Dir) (*spec.Declaration, error) {
	data, err := os.ReadFile(dir.Declaration())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the saved declaration: %w", err)
	}
	d, err := specjson.ParseDeclaration(data)
	if err != nil {
		return nil, fmt.Errorf("the saved declaration %s: %w", dir.Declaration(), err)
	}
	return d, nil
}

// Run passes on every declaration change and every Interval until ctx
// ends. After a failed pass (podman's API or the resolver down, say) the
// next one comes sooner: RetryMin, doubling with each failure in a row up
// to Interval. Run never returns because a pass failed, and never stops a
// container on its way out.
func (a *Agent) Run(ctx context.Context) error {
	wait := a.cfg.Interval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	failures := 0
	for {
		if _, err := a.Pass(ctx); err != nil && ctx.Err() == nil {
			failures++
			wait = RetryWait(a.cfg.RetryMin, a.cfg.Interval, failures)
			a.log.Error("pass failed; retrying", "pass", a.passes.Load(), "in", wait, "failures_in_a_row", failures, "err", err)
		} else {
			failures, wait = 0, a.cfg.Interval
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-a.cfg.Source.Changed():
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
	ctx = logging.WithAttrs(ctx, "pass", a.passes.Add(1))
	defer func() {
		if v := recover(); v != nil {
			err = a.recovered(ctx, "the pass", v)
		}
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
	}()
	if a.inForce == nil {
		// Once, after a start: the saved roster the resolver serves.
		// Asked before there is a declaration too, so that the Source
		// refuses a first one whose roster is older, or reuses its
		// generation with other names. Kept from then on, since
		// rebuilding it from the resolver's table costs a pass as much as
		// the rest for a large roster.
		a.setInForceLocked(a.cfg.Resolver.Roster())
	}
	decl, origin := a.cfg.Source.Current()
	if decl == nil {
		return nil, nil // nothing declared yet: serve the saved roster, touch nothing
	}
	rep = &Report{Generation: decl.Generation, Modes: map[string]string{}}
	ctx = logging.WithAttrs(ctx, "declaration_generation", decl.Generation)

	// 0. The declaration in force is saved before anything acts on it, so
	// an agent killed mid-pass resumes toward it, not toward an older one
	// (which would remove the containers the newer one added).
	if decl.Generation != a.saved {
		if err := a.saveDeclaration(decl); err != nil {
			return rep, err
		}
		a.saved = decl.Generation
	}

	// 1. The roster reaches the resolver first; no container is touched.
	roster, unsaved, err := a.rosterInForceLocked(ctx, decl.Roster)
	if err != nil {
		return rep, err
	}
	rep.RosterGeneration = roster.Generation
	ctx = logging.WithAttrs(ctx, "roster_generation", roster.Generation)
	if a.heldRoster != nil {
		rep.RosterHeld = a.heldRoster.Error()
	}

	// 2. The gate: networks, probes, modes.
	if err := a.cfg.Gate.SetFlag(decl.MeshNames); err != nil {
		return rep, fmt.Errorf("setting the migration flag: %w", err)
	}
	if err := a.gateLocked(ctx, roster, rep); err != nil {
		return rep, err
	}
	observed, err := a.cfg.Runtime.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("listing containers: %w", err)
	}

	// 3. What the pass does (package pass, as `meshhost plan` computes
	// it), then doing it.
	c, err := pass.Compute(ctx, pass.Input{
		Declaration: decl, Roster: roster, Gate: a.cfg.Gate, Observed: observed, Planner: a.cfg.Reconciler,
		HoldAbove: a.cfg.HoldAbove, Approved: func() uint64 { return ApprovedDeclaration(a.cfg.State) },
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
	a.controlsLocked(decl, roster, c.Hold, freeze, ferr)
	if rep.Frozen || c.Hold.Held() {
		// Nothing of the plan is applied: the containers stay as they
		// are. The roster is in force already, and the next pass judges
		// again (an approval, an unfreeze, a newer declaration).
		return rep, unsaved
	}
	res, err := a.cfg.Reconciler.Apply(ctx, c.Plan)
	rep.Result = res
	a.recordPass(ctx, decl.Generation, res)
	if err != nil {
		return rep, fmt.Errorf("reconciling: %w", err)
	}

	// 4. Remember what was applied.
	a.recordDeclarationLocked(ctx, decl, origin)
	a.metrics.declaration.Set(float64(decl.Generation))
	return rep, errors.Join(unsaved, res.Err())
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

// recordDeclarationLocked journals decl the first time a pass applied it.
func (a *Agent) recordDeclarationLocked(ctx context.Context, decl *spec.Declaration, origin string) {
	syncs.AssertLocked(&a.mu)
	if decl.Generation == a.applied {
		return
	}
	if a.cfg.Journal != nil {
		if _, err := a.cfg.Journal.RecordDeclaration(decl, time.Now()); err != nil && !errors.Is(err, journal.ErrOlderGeneration) {
			a.log.WarnContext(ctx, "recording the declaration in the journal", "err", err)
		}
	}
	a.applied = decl.Generation
	a.log.InfoContext(ctx, "declaration applied", "declaration_generation", decl.Generation, "origin", origin)
}

// rosterInForceLocked updates the resolver with the declared roster unless
// the guard holds it (pass.RosterInForce decides), and returns the roster
// containers are rendered with: the one the resolver serves. unsaved is set
// when that roster is served but the resolver could not save it: the pass
// goes on, and fails at its end.
func (a *Agent) rosterInForceLocked(ctx context.Context, declared *spec.Roster) (_ *spec.Roster, unsaved, err error) {
	syncs.AssertLocked(&a.mu)
	held := a.heldRoster
	a.heldRoster = nil
	a.metrics.rosterHeld.Set(0)
	c := pass.RosterInForce(a.inForce, declared, a.cfg.Guard, a.accepted)
	switch {
	case c.Older:
		if a.olderLogged != declared.Generation {
			// Generations never go backwards: keep serving the newer one.
			a.log.WarnContext(ctx, "declared roster is older than the one served; keeping the newer", "roster_generation", declared.Generation, "served_roster_generation", c.InForce.Generation)
			a.olderLogged = declared.Generation
		}
		return c.InForce, nil, nil
	case c.Held != nil:
		a.heldRoster = c.Held
		a.metrics.rosterHeld.Set(1)
		if held == nil || held.Error() != c.Held.Error() { // loud once; the metric stays
			a.log.ErrorContext(ctx, "roster held", "roster_generation", declared.Generation, "err", c.Held)
		}
		return c.InForce, nil, nil
	case !c.Update:
		return c.InForce, nil, nil
	case c.Accepted:
		a.log.WarnContext(ctx, "roster shrink accepted by the operator", "roster_generation", declared.Generation)
	}
	if err := a.cfg.Resolver.Update(declared); err != nil {
		err = fmt.Errorf("updating the resolver to roster generation %d: %w", declared.Generation, err)
		// The resolver serves a roster it could not save (a full disk)
		// rather than none: it is in force, and the next pass must not
		// offer it again (the resolver would refuse it as not newer, and
		// every pass after would fail). This pass goes on with it, and
		// reports the error at its end.
		served := a.cfg.Resolver.Roster() // costly, but only on this error
		if served == nil || served.Generation < declared.Generation {
			return nil, nil, err
		}
		a.setInForceLocked(served)
		a.log.ErrorContext(ctx, "roster in force but not saved: after a restart the resolver serves the roster it saved before, until the first pass", "roster_generation", served.Generation, "err", err)
		return served, err, nil
	}
	a.setInForceLocked(declared)
	a.log.InfoContext(ctx, "roster in force", "roster_generation", declared.Generation, "names", len(declared.Names))
	return declared, nil, nil
}

// setInForceLocked records r as the roster the resolver serves, and tells
// the Source, which refuses a declaration whose roster contradicts it.
func (a *Agent) setInForceLocked(r *spec.Roster) {
	syncs.AssertLocked(&a.mu)
	a.inForce = r
	a.cfg.Source.SetServed(r)
}

func (a *Agent) accepted() uint64 { return AcceptedRoster(a.cfg.State) }

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

// AcceptRoster lets roster generation gen shrink past the guard.
func AcceptRoster(dir statedir.Dir, gen uint64) error {
	return writeAtomic(dir.RosterAccept(), []byte(strconv.FormatUint(gen, 10)+"\n"))
}

func (a *Agent) gateLocked(ctx context.Context, roster *spec.Roster, rep *Report) error {
	syncs.AssertLocked(&a.mu)
	if a.cfg.Networks == nil {
		return nil
	}
	nets, err := a.cfg.Networks.Networks(ctx)
	if err != nil {
		return fmt.Errorf("listing networks: %w", err)
	}
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
	if err := a.ensureProberLocked(roster); err != nil {
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
		a.log.Log(ctx, level, "probe", "network", r.Network, "passed", r.Pass, "strategy", r.Strategy, "reason", r.Reason, "latency", r.Latency)
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

func (a *Agent) ensureProberLocked(roster *spec.Roster) error {
	syncs.AssertLocked(&a.mu)
	if a.cfg.NewProber == nil || a.prober != nil {
		return nil
	}
	if len(roster.Zones) == 0 {
		return errors.New("the roster has no zone to ask the canary under")
	}
	p, err := a.cfg.NewProber(roster.Zones[0])
	if err != nil {
		return err
	}
	a.prober = p
	return nil
}

func (a *Agent) saveDeclaration(d *spec.Declaration) error {
	// The document as received: a 100,000-name roster costs a second to
	// marshal again, and what was parsed once parses again the same way.
	data := a.cfg.Source.Document()
	if cur, _ := a.cfg.Source.Current(); data == nil || cur != d {
		var err error
		if data, err = d.MarshalJSON(); err != nil {
			return err
		}
	}
	if err := writeAtomic(a.cfg.State.Declaration(), data); err != nil {
		return fmt.Errorf("saving the applied declaration: %w", err)
	}
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
// NOTIFY_SOCKET) until ctx ends: READY=1 once its resolver answers,
// WATCHDOG=1 from a loop of its own that never waits for a pass (a pass
// may wait minutes on a health-gated start), as long as Liveness holds,
// and STOPPING=1 at the end.
func (a *Agent) Notify(ctx context.Context) { Notify(ctx, a.log, a.Liveness) }

// Notify is Agent.Notify with alive in the place of Liveness, for the
// agent command while it has no Agent yet (podman's API down at start).
func Notify(ctx context.Context, log *slog.Logger, alive func() error) {
	if !sdnotify.Enabled() {
		return
	}
	defer sdnotify.Notify(sdnotify.Stopping)
	go sdnotify.WatchdogLoop(ctx, log, alive)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for alive() != nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	if err := sdnotify.Notify(sdnotify.Ready + "\nSTATUS=the resolver answers"); err != nil {
		log.Warn("telling systemd the agent is ready", "err", err)
	}
	<-ctx.Done()
}

// writeAtomic writes a state file whole or not at all.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
