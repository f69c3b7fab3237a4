package sim

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/pass/rosterguard"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// Machine is the name every simulated declaration is for.
const Machine = "sim"

// Guard is the roster guard the simulated agent runs with, and the one the
// invariants judge by.
var Guard = rosterguard.DefaultPolicy

// HoldAbove is the simulated agent's --hold-above: small, so that holds
// and approvals happen.
const HoldAbove = 3

// Budget is the simulated reconciler's replacement budget: small, so that
// deferrals happen and clock jumps matter.
var Budget = reconcile.Budget{Max: 4, Window: 10 * time.Minute}

// bridge is the runtime's one network, podman's default.
type bridge struct{}

func (bridge) Networks(context.Context) ([]migrations.Network, error) {
	return []migrations.Network{{Name: spec.DefaultNetwork, Driver: "bridge", Subnets: []migrations.Subnet{{
		Prefix: netip.MustParsePrefix("10.88.0.0/16"), Gateway: netip.MustParseAddr("10.88.0.1"),
	}}}}, nil
}

// noting is the embedded resolver as the agent is given it: every Update
// and Apply goes through, and the world learns whether the roster served
// is saved (the resolver serves a roster it could not save, and says so).
type noting struct {
	*resolver.Server
	note func(served *spec.Roster, saved bool)
}

func (r noting) Update(x *spec.Roster) error {
	err := r.Server.Update(x)
	r.noted(x.Generation, err)
	return err
}

func (r noting) Apply(d *spec.RosterDelta) error {
	err := r.Server.Apply(d)
	r.noted(d.To, err)
	return err
}

// noted tells the world what serves after a change to generation gen that
// returned err: saved when it returned nil, served but not saved when the
// resolver serves gen all the same.
func (r noting) noted(gen uint64, err error) {
	if cur := r.Server.Roster(); cur != nil && cur.Generation == gen && r.note != nil {
		r.note(cur, err == nil)
	}
}

// listening is the embedded resolver as the agent's Exposer is given it
// (migrations.NewExposer, as the agent command makes it): everything goes
// through but Listen and Unlisten, which only record the address (the
// simulation has no sockets; the resolver is asked in-process, Answer).
// The agent's listeners die with it: a new incarnation listens on nothing
// until its first pass exposes the resolver.
type listening struct {
	*resolver.Server
	on map[netip.AddrPort]bool
}

func (l listening) Listen(a netip.AddrPort) error   { l.on[a] = true; return nil }
func (l listening) Unlisten(a netip.AddrPort) error { delete(l.on, a); return nil }

// incarnation is one boot of the agent from the state directory.
type incarnation struct {
	source *declsource.Source
	srv    *resolver.Server
	// listens is every address the resolver listens on, as the agent's
	// Exposer made it.
	listens map[netip.AddrPort]bool
	gate    *migrations.Gate
	jnl     *journal.Journal
	rec     *reconcile.Reconciler
	agent   *agent.Agent
}

// boot starts the agent from dir over rt, as the agent command does (now
// is the wall clock of the gate and the reconciler: synctest's, set back
// by the backward steps before this boot): the
// resolver first (serving its saved roster), the saved declaration as the
// Source's initial one, the gate, the journal, the reconciler.
func boot(dir statedir.Dir, rt *memory.Runtime, note func(served *spec.Roster, saved bool), servedAtBoot bool, now func() time.Time, probe func(nets []migrations.Network) []migrations.Result) (*incarnation, error) {
	if err := dir.Create(); err != nil {
		return nil, err
	}
	srv, err := resolver.New(resolver.Config{
		StatePath: dir.Roster(),
		Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")},
	})
	if err != nil {
		return nil, fmt.Errorf("resolver: %w", err)
	}
	saved, err := agent.LoadSaved(dir)
	if err != nil {
		saved = nil // as the agent command: refused, and the next declaration takes over
	}
	var initial *spec.Declaration
	if saved != nil {
		initial = saved.Declaration
	}
	source := declsource.New(declsource.Config{Machine: Machine, Initial: initial})
	if _, ok := source.Head(); !ok {
		saved = nil
	}
	if servedAtBoot {
		// What the agent command should do and does not (sim-note.md,
		// defect 2): tell the Source the roster the resolver serves before
		// any input is read, not at the agent's first pass (which waits for
		// the runtime).
		if r := srv.Roster(); r != nil {
			source.SetServed(r.Generation, srv.Roster)
		}
	}
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: Machine, Now: now})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("gate: %w", err)
	}
	jnl, err := journal.Open(dir.Journal(), journal.Options{})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("journal: %w", err)
	}
	hashKey, err := dir.LoadHashKey() // the machine's, kept across restarts as the agent's is
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("hash key: %w", err)
	}
	// As the agent command: the budget's charges kept in the state
	// directory across restarts, saved after every pass.
	rec, saveState, err := agent.OpenReconciler(reconcile.Config{
		Runtime: rt, Owner: Machine, Budget: Budget, Concurrency: 1, HashKey: hashKey, Now: now,
		Frozen: func() bool { f, _ := agent.Frozen(dir); return f != nil },
	}, dir.Reconciler(), slog.New(slog.DiscardHandler))
	if err != nil {
		srv.Close()
		return nil, err
	}
	listens := map[netip.AddrPort]bool{}
	exp, err := migrations.NewExposer(migrations.ExposerConfig{Resolver: listening{srv, listens}})
	if err != nil {
		srv.Close()
		return nil, err
	}
	a, err := agent.New(agent.Config{
		Runtime: rt, Reconciler: rec, Resolver: noting{srv, note}, Gate: gate, Source: source, Networks: bridge{},
		Exposer: exp, Journal: jnl, State: dir, Saved: saved, Guard: Guard, HoldAbove: HoldAbove,
		AfterPass: func(*agent.Report) { saveState() },
		NewProber: func(string) (agent.Prober, error) { return scripted{probe, exp}, nil },
	})
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &incarnation{source: source, srv: srv, listens: listens, gate: gate, jnl: jnl, rec: rec, agent: a}, nil
}

// scripted is the agent's prober: it probes nothing, and answers what the
// schedule says (world.probe): a pass, or a failure, at the gate's clock.
// As the real one (migrations.Runner), it exposes the resolver through
// the strategy before each probe, and leaves it exposed whatever the
// outcome.
type scripted struct {
	probe func(nets []migrations.Network) []migrations.Result
	exp   *migrations.Exposer
}

func (p scripted) Probe(_ context.Context, nets []migrations.Network, _ map[string]migrations.Strategy) []migrations.Result {
	for _, n := range nets {
		p.exp.Expose(n, migrations.StrategyGateway) // the recording Listen does not fail
	}
	return p.probe(nets)
}

// proveNetworks records a passed probe of the runtime's network in the
// gate, as a prober that ran before would have: flag on or auto then
// means resolve mode, without a prober in the simulation.
func proveNetworks(g *migrations.Gate) error {
	nets, _ := bridge{}.Networks(context.Background())
	if _, err := g.Observe(nets); err != nil {
		return err
	}
	return g.Record([]migrations.Result{{Network: spec.DefaultNetwork, Kind: migrations.KindBridge, Pass: true, At: time.Now(),
		Strategy: migrations.StrategyGateway,
		DNS:      spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Search: []string{"internal"}, Options: []string{"ndots:1"}}}})
}

// stop ends an incarnation, as a crash would: nothing is flushed or
// stopped in order, the containers keep running.
func (in *incarnation) stop() {
	in.srv.Close()
}
