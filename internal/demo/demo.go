// Package demo replays the incident: the operator actions that, with the
// roster copied into containers, replaced every container on every machine.
// It runs them once in copy mode and once in resolve mode through the
// agent's own pipeline (package pass, then the reconciler's Apply), and
// counts the replacements from the runtime itself (containers whose ID
// changed), not from the plan.
package demo

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/meshhost/meshhost/internal/demo/incident"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Options configures a replay.
type Options struct {
	// Machines to simulate; default incident.Machines.
	Machines []string
	// NewRuntime returns the runtime of one machine for one mode, and a
	// cleanup. The demo command passes in-memory runtimes, or podman.
	NewRuntime func(machine string, mode spec.NameMode) (reconcile.Runtime, func(), error)
	// Adapt, when set, changes each declared container before rendering
	// (the podman demo swaps in a local image and a unique name).
	Adapt func(spec.Container) spec.Container
	// Budget is each machine's replacement budget; default reconcile.DefaultBudget.
	Budget reconcile.Budget
	// PassEvery is the simulated time between reconcile passes. Default 20s.
	PassEvery time.Duration
	// Simulated: advance a simulated clock instead of sleeping (the
	// in-memory runtime). With real podman, passes run back to back.
	Simulated bool
	// Progress, when set, receives a line per pass.
	Progress func(format string, args ...any)
}

// Row is the outcome of one action in one mode.
type Row struct {
	Action   string         `json:"action"`
	Mode     spec.NameMode  `json:"mode"`
	Replaced map[string]int `json:"replaced"`
	Created  map[string]int `json:"created"`
	Removed  map[string]int `json:"removed"`
	// Converged is how long until every machine matched its declaration,
	// on the simulated clock (or the wall clock with real podman).
	Converged time.Duration `json:"-"`
	// ConvergedSeconds is Converged, in the JSON.
	ConvergedSeconds float64 `json:"converged_after_seconds"`
	Passes           int     `json:"passes"`
	Timeline         []Tick  `json:"timeline,omitempty"`
}

// Tick is one pass on one machine that did something.
type Tick struct {
	At        time.Duration `json:"-"`          // since the push
	AtSeconds float64       `json:"at_seconds"` // At, in the JSON
	Machine   string        `json:"machine"`
	Replaced  int           `json:"replaced"`
	Deferred  int           `json:"deferred"`
}

// ResolverAddr is the resolver address resolve-mode containers get in the demo.
var ResolverAddr = netip.MustParseAddr("10.88.0.1")

// Run replays every action in copy mode, then in resolve mode.
func Run(ctx context.Context, opts Options) ([]Row, error) {
	if len(opts.Machines) == 0 {
		opts.Machines = incident.Machines
	}
	if opts.Budget == (reconcile.Budget{}) {
		opts.Budget = reconcile.DefaultBudget
	}
	if opts.PassEvery == 0 {
		opts.PassEvery = 20 * time.Second
	}
	if opts.Progress == nil {
		opts.Progress = func(string, ...any) {}
	}
	var rows []Row
	for _, mode := range []spec.NameMode{spec.Copy, spec.Resolve} {
		r, err := replay(ctx, opts, mode)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// machine is one simulated machine: its runtime and reconciler.
type machine struct {
	name    string
	rt      reconcile.Runtime
	rec     *reconcile.Reconciler
	cleanup func()
}

func replay(ctx context.Context, opts Options, mode spec.NameMode) ([]Row, error) {
	clock := &simClock{now: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	now := time.Now
	if opts.Simulated {
		now = clock.Now
	}
	var machines []*machine
	defer func() {
		for _, m := range machines {
			m.cleanup()
		}
	}()
	for _, name := range opts.Machines {
		rt, cleanup, err := opts.NewRuntime(name, mode)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rec, err := reconcile.New(reconcile.Config{Runtime: rt, Budget: opts.Budget, Now: now, HealthPoll: 10 * time.Millisecond, Concurrency: 4})
		if err != nil {
			cleanup()
			return nil, err
		}
		machines = append(machines, &machine{name, rt, rec, cleanup})
	}

	mesh := incident.New()
	flag := spec.FlagOff
	if mode == spec.Resolve {
		flag = spec.FlagOn
	}
	opts.Progress("%s mode: deploying the mesh (generation %d)", mode, mesh.Generation)
	if _, err := converge(ctx, opts, mode, clock, machines, mesh.Declarations(flag), "deploy"); err != nil {
		return nil, err
	}

	var rows []Row
	for _, action := range incident.Actions() {
		decls := mesh.Push(action, flag)
		opts.Progress("%s mode: %s (generation %d)", mode, action.Name, mesh.Generation)
		row, err := converge(ctx, opts, mode, clock, machines, decls, action.Name)
		if err != nil {
			return rows, err
		}
		rows = append(rows, *row)
	}
	return rows, nil
}

// converge runs passes on every machine until all match their declaration,
// and counts what changed from the runtimes' own lists.
func converge(ctx context.Context, opts Options, mode spec.NameMode, clock *simClock, machines []*machine, decls map[string]*spec.Declaration, action string) (*Row, error) {
	row := &Row{Action: action, Mode: mode, Replaced: map[string]int{}, Created: map[string]int{}, Removed: map[string]int{}}
	before := map[string]map[string]string{}
	declared := map[string]*spec.Declaration{}
	for _, m := range machines {
		ids, err := containerIDs(ctx, m.rt)
		if err != nil {
			return nil, err
		}
		before[m.name] = ids
		d := decls[m.name]
		if d == nil {
			return nil, fmt.Errorf("no declaration for machine %s", m.name)
		}
		declared[m.name] = adapt(d, opts.Adapt)
	}
	gate := fixedMode(modeOf(mode))
	start, wallStart := clock.Now(), time.Now()
	pending := slices.Clone(machines)
	for pass := 1; len(pending) > 0; pass++ {
		if pass > 500 {
			return nil, fmt.Errorf("%s: not converged after 500 passes", action)
		}
		row.Passes = pass
		var mu sync.Mutex
		var next []*machine
		var wg sync.WaitGroup
		var firstErr error
		for _, m := range pending {
			wg.Go(func() {
				res, err := m.pass(ctx, declared[m.name], gate)
				mu.Lock()
				defer mu.Unlock()
				if err != nil { // res may be nil: never read it then
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", m.name, err)
					}
					return
				}
				replaced := res.Count(reconcile.Replace)
				if replaced > 0 {
					at := clock.Now().Sub(start)
					if !opts.Simulated {
						at = time.Since(wallStart)
					}
					row.Timeline = append(row.Timeline, Tick{At: at.Round(time.Second), AtSeconds: at.Round(time.Second).Seconds(), Machine: m.name, Replaced: replaced, Deferred: res.Deferred})
				}
				if res.Deferred > 0 {
					next = append(next, m)
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return nil, firstErr
		}
		pending = next
		slices.SortStableFunc(row.Timeline, func(a, b Tick) int {
			return slices.Index(incident.Machines, a.Machine) - slices.Index(incident.Machines, b.Machine)
		})
		if len(pending) > 0 {
			opts.Progress("  pass %d: %d machine(s) wait for their replacement budget", pass, len(pending))
			clock.Advance(opts.PassEvery)
		}
	}
	if opts.Simulated {
		row.Converged = clock.Now().Sub(start)
	} else {
		row.Converged = time.Since(wallStart).Round(time.Millisecond)
	}
	row.ConvergedSeconds = row.Converged.Seconds()
	for _, m := range machines {
		after, err := containerIDs(ctx, m.rt)
		if err != nil {
			return nil, err
		}
		for name, id := range after {
			old, existed := before[m.name][name]
			switch {
			case !existed:
				row.Created[m.name]++
			case old != id:
				row.Replaced[m.name]++
			}
		}
		for name := range before[m.name] {
			if _, still := after[name]; !still {
				row.Removed[m.name]++
			}
		}
		if _, counted := row.Replaced[m.name]; !counted {
			row.Replaced[m.name] = 0 // every machine appears in the table, zero included
		}
	}
	return row, nil
}

// pass runs one pass of the machine the way the agent does (package pass,
// then Apply), with the declared roster in force (the demo has no resolver
// to hold one back) and every container in the gate's one mode. It returns
// an error when the pass could not be computed (and no Result), or when an
// action failed.
func (m *machine) pass(ctx context.Context, d *spec.Declaration, gate pass.Gate) (*reconcile.Result, error) {
	observed, err := m.rt.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	c, err := pass.Compute(ctx, pass.Input{Declaration: d, Roster: d.Roster, Gate: gate, Observed: observed, Planner: m.rec})
	if err != nil {
		return nil, err
	}
	return m.rec.Apply(ctx, c.Plan)
}

// modeOf is the one mode every container gets in a demo of name mode mode.
func modeOf(mode spec.NameMode) spec.Mode {
	m := spec.Mode{Names: mode}
	if mode == spec.Resolve {
		m.DNS = spec.DNSConfig{Servers: []netip.Addr{ResolverAddr}, Search: []string{incident.Zone}, Options: []string{"ndots:1"}}
	}
	return m
}

// fixedMode is the demo's migration gate: one mode for every container.
type fixedMode spec.Mode

func (m fixedMode) Modes(cs []spec.Container, _ []reconcile.Observed) map[string]spec.Mode {
	out := make(map[string]spec.Mode, len(cs))
	for _, c := range cs {
		out[c.Name] = spec.Mode(m)
	}
	return out
}

// adapt returns d with fn applied to each container (Options.Adapt), or d
// itself when fn is nil.
func adapt(d *spec.Declaration, fn func(spec.Container) spec.Container) *spec.Declaration {
	if fn == nil {
		return d
	}
	out := *d
	out.Containers = make([]spec.Container, len(d.Containers))
	for i, c := range d.Containers {
		out.Containers[i] = fn(c)
	}
	return &out
}

// containerIDs maps the name of every managed container to its ID.
func containerIDs(ctx context.Context, rt reconcile.Runtime) (map[string]string, error) {
	list, err := rt.List(ctx)
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	for _, o := range list {
		if reconcile.ManagedBy(o, "") { // the demo's reconcilers have no owner
			ids[o.Name] = o.ID
		}
	}
	return ids, nil
}

// Machines returns the machine names of rows, in the incident's order.
func Machines(rows []Row) []string {
	seen := map[string]bool{}
	for _, r := range rows {
		for m := range r.Replaced {
			seen[m] = true
		}
	}
	var out []string
	for _, m := range incident.Machines {
		if seen[m] {
			out = append(out, m)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(seen)) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
