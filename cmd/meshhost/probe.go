package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/dnsstub"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

const probeLong = `Runs a short-lived probe container on every podman network, configured as a
resolve-mode container there, with a resolver of its own (canary zone
` + probeZone + `, forwarding to a stub on loopback), and prints one row per
network. It binds the strategies' addresses itself, so while the agent holds
them the rows say so: read the agent's results with meshhost migrate status.
With --state under flag auto it also says which networks the switch waits for
and which it ignores because no declared container uses them.
Exit 0 when every network passed, 3 when one failed (used or not).`

func init() {
	register(command{name: "probe", summary: "prove, network by network, that containers reach the resolver", long: probeLong, define: defineProbe})
}

// probeZone and probeOutside are what the standalone probe's own resolver
// serves: the canary's zone, and an outside name answered by a stub
// upstream on loopback, so the forwarding path is proven without sending
// anything off the machine.
const (
	probeZone    = "meshhost-probe.invalid"
	probeOutside = "outside.meshhost-probe.test"
)

var probeOutsideAddr = netip.MustParseAddr("192.0.2.53")

func defineProbe(env *environment, fs *flag.FlagSet) runner {
	socket := fs.String("podman", "", "podman API socket URI (default $MESHHOST_PODMAN_SOCKET or $CONTAINER_HOST)")
	stateDir := fs.String("state", "", "record the results in the migration state in `DIR` (as the agent does); default: only print them")
	output := fs.String("output", "text", "output format: text or json")
	nodeLocal := fs.String("node-local", migrations.DefaultNodeLocal, "the node-local address (assigned to lo) of the node-local strategy")
	loopback := fs.String("loopback", migrations.DefaultLoopback, "the loopback address (127.0.0.0/8) of the aardvark and loopback strategies")
	binary := fs.String("probe-binary", "", "the meshprobe binary (default $"+migrations.EnvProbeBinary+", next to meshhost, or on $PATH)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole probe")
	return func(ctx context.Context, args []string) (int, error) {
		nl, err := netip.ParseAddr(*nodeLocal)
		if err != nil {
			return exitUsage, fmt.Errorf("--node-local: %w", err)
		}
		lo, err := netip.ParseAddr(*loopback)
		if err != nil {
			return exitUsage, fmt.Errorf("--loopback: %w", err)
		}
		// The state directory before anything is imported or started: a
		// typo must not cost a probe run, and its results.
		var gate *migrations.Gate
		if *stateDir != "" {
			var code int
			if gate, nl, lo, code, err = openProbeGate(ctx, fs, *stateDir, nl, lo); err != nil {
				return code, err
			}
		}
		*socket = podmanSocket(env, *socket)
		if *socket == "" {
			return exitError, errNoPodman
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()

		p, err := podman.New(ctx, *socket, nil)
		if err != nil {
			return 1, err
		}
		runner, closeRunner, err := newProbeRunner(ctx, p, *binary, nl, lo)
		if err != nil {
			return 1, err
		}
		defer closeRunner()
		var prefer map[string]migrations.Strategy
		if gate != nil {
			prefer = gate.Strategies()
		}
		nets, err := p.Networks(ctx)
		if err != nil {
			return 1, err
		}
		if gate != nil {
			// The host's network, where the agent's declaration uses it.
			nets = migrations.WithHost(nets, gate.State().Used)
		}
		results := runner.Probe(ctx, nets, prefer)
		if gate != nil {
			if _, err := gate.Observe(nets); err != nil {
				return 1, err
			}
			if err := gate.Record(results); err != nil {
				return 1, err
			}
		}
		return printProbe(env, gate, results, *output == "json")
	}
}

// openProbeGate opens the migration gate of the state directory dir, to
// record the results in, and returns the addresses to probe: the agent's,
// as its gate records them, unless the flags say.
func openProbeGate(ctx context.Context, fs *flag.FlagSet, stateDir string, nl, lo netip.Addr) (*migrations.Gate, netip.Addr, netip.Addr, int, error) {
	dir, err := existingState(stateDir)
	if err != nil {
		return nil, nl, lo, exitError, err
	}
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations()})
	if err != nil {
		return nil, nl, lo, exitError, err
	}
	// A proof recorded for the agent proves the addresses its resolver is
	// exposed on, not this command's: the agent's, as its gate records
	// them (the defaults until it has).
	set := gate.State().Settings
	if nl, err = agentAddress(ctx, fs, "node-local", nl, set.NodeLocal, migrations.DefaultNodeLocal, dir.Migrations()); err != nil {
		return nil, nl, lo, exitUsage, err
	}
	if lo, err = agentAddress(ctx, fs, "loopback", lo, set.Loopback, migrations.DefaultLoopback, dir.Migrations()); err != nil {
		return nil, nl, lo, exitUsage, err
	}
	return gate, nl, lo, 0, nil
}

// newProbeRunner makes the probe's runner: its image from the meshprobe
// binary (bin, or found), and a resolver of its own whose upstream is a
// stub; closeRunner closes that resolver.
func newProbeRunner(ctx context.Context, p *podman.Runtime, bin string, nl, lo netip.Addr) (runner *migrations.Runner, closeRunner func(), err error) {
	if bin == "" {
		if bin, err = migrations.FindProbeBinary(); err != nil {
			return nil, nil, err
		}
	}
	image, err := migrations.ProbeImage(ctx, p, bin)
	if err != nil {
		return nil, nil, err
	}
	stub, err := startStubUpstream(ctx)
	if err != nil {
		return nil, nil, err
	}
	srv, err := resolver.New(resolver.Config{Upstreams: []netip.AddrPort{stub}})
	if err != nil {
		return nil, nil, err
	}
	if err := srv.Update(&spec.Roster{Generation: 1, Zones: []string{probeZone}}); err != nil {
		srv.Close()
		return nil, nil, err
	}
	runner, err = migrations.NewRunner(migrations.RunnerConfig{
		Runtime: p, Resolver: srv, Image: image, Zone: probeZone,
		Outside: probeOutside, OutsideWant: probeOutsideAddr, NodeLocal: nl, Loopback: lo,
	})
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return runner, func() { srv.Close() }, nil
}

// printProbe prints the results (with the gate's, when recorded); exit 3
// when a network failed.
func printProbe(env *environment, gate *migrations.Gate, results []migrations.Result, asJSON bool) (int, error) {
	code := 0
	for _, r := range results {
		if !r.Pass {
			code = exitProbe
		}
	}
	if asJSON {
		out := probeJSON(results)
		if gate != nil {
			st := gate.State()
			for i := range out {
				out[i].Used = usedOf(st, out[i].Network)
			}
		}
		return code, json.NewEncoder(env.stdout).Encode(out)
	}
	printProbeTable(env, results)
	if gate != nil && gate.State().Flag == spec.FlagAuto {
		// What the results recorded mean for the switch: a failing
		// network no declared container uses holds nothing back.
		fmt.Fprintf(env.stdout, "\n%s\n", autoLine(gate.Auto()))
	}
	return code, nil
}

func printProbeTable(env *environment, results []migrations.Result) {
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tDRIVER\tKIND\tSTRATEGY\tRESULT\tLATENCY\tRUNTIME\tREASON")
	for _, r := range results {
		res := "fail"
		if r.Pass {
			res = "pass"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\n", r.Network, r.Driver, r.Kind, cmp.Or(string(r.Strategy), "-"),
			res, r.Latency.Round(100*time.Microsecond), r.Runtime, r.Reason)
	}
	tw.Flush()
}

// startStubUpstream answers A for probeOutside with probeOutsideAddr, and
// NXDOMAIN for anything else, on a loopback UDP port until ctx ends.
func startStubUpstream(ctx context.Context) (netip.AddrPort, error) {
	return dnsstub.Start(ctx, probeOutside, probeOutsideAddr)
}

// agentAddress is the address --name stands for under --state: the one
// the agent's gate records in its state file at path (def when it records
// none). A --name given that differs is refused: its proof would send the
// agent's containers to a nameserver the agent does not serve.
func agentAddress(ctx context.Context, fs *flag.FlagSet, name string, given, recorded netip.Addr, def, path string) (netip.Addr, error) {
	agent := recorded
	if !agent.IsValid() {
		agent = netip.MustParseAddr(def)
	}
	set := givenFlags(ctx)[name] // the command line's (under cobra)
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if set && given.Unmap() != agent {
		return netip.Addr{}, fmt.Errorf("--%s %s: the agent's resolver is exposed on %s (as %s records it), and a proof of another address would give its containers a nameserver nobody serves; drop --%s (or change the agent's --%s)", name, given, agent, path, name, name)
	}
	return agent, nil
}
