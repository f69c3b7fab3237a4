package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/spec"
)

func init() {
	register(command{name: "migrate", use: "status|pause|resume", summary: "show, pause or resume the switch from copied names to the resolver",
		args: cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs), valid: []string{"status", "pause", "resume"}, define: defineMigrate})
}

func defineMigrate(env *environment, fs *flag.FlagSet) runner {
	stateDir := fs.String("state", statedir.Default, "the agent's state `DIR`")
	machine := fs.String("machine", "", "the machine whose containers to list (default: the one of the declaration the agent applied last, else the host name, as the agent's)")
	socket := fs.String("podman", "", "podman API socket URI, to list the containers (default $MESHHOST_PODMAN_SOCKET or $CONTAINER_HOST)")
	output := fs.String("output", "text", "output format: text or json")
	return func(ctx context.Context, args []string) (int, error) {
		sub := args[0]
		dir, err := existingState(*stateDir)
		if err != nil {
			return 1, err
		}
		owner := *machine
		if owner == "" {
			owner = defaultMachine()
			if d, err := agent.LoadDeclaration(dir); err == nil && d != nil {
				owner = d.Machine
			}
		}
		gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: owner})
		if err != nil {
			return 1, err
		}
		if sub == "pause" || sub == "resume" {
			return migratePause(env, gate, sub == "pause", *output == "json")
		}
		observed, listErr := listObserved(ctx, podmanSocket(env, *socket))
		st, auto := gate.State(), gate.Auto()
		containers := gate.Status(gate.ObservedContainers(observed), observed, nil)
		if *output == "json" {
			code := 0
			if listErr != "" {
				code = 1 // as the text says it
			}
			return code, json.NewEncoder(env.stdout).Encode(struct {
				State      migrateStateJSON             `json:"state"`
				Containers []migrations.ContainerStatus `json:"containers"`
				ListError  string                       `json:"list_error,omitempty"`
			}{migrateStateOf(st, auto), orEmpty(containers), listErr})
		}
		printMigrateNetworks(env.stdout, st, auto)
		if listErr != "" {
			fmt.Fprintf(env.stdout, "containers: %s\n", listErr)
			return 1, nil
		}
		printMigrateContainers(env.stdout, containers)
		return 0, nil
	}
}

// migratePause pauses (pause) or resumes the migration.
func migratePause(env *environment, gate *migrations.Gate, pause, asJSON bool) (int, error) {
	change, done := gate.Resume, "resumed: containers switch name mode as the flag and the probes say"
	if pause {
		change, done = gate.Pause, "paused: no container changes its name mode (the switch, either way) until meshhost migrate resume"
	}
	if err := change(); err != nil {
		return exitError, err
	}
	if asJSON {
		return exitOK, json.NewEncoder(env.stdout).Encode(struct {
			State migrateStateJSON `json:"state"`
		}{migrateStateOf(gate.State(), gate.Auto())})
	}
	fmt.Fprintf(env.stdout, "migration %s\n", done)
	return exitOK, nil
}

// listObserved lists the containers of podman at socket, or says why not.
func listObserved(ctx context.Context, socket string) (observed []reconcile.Observed, listErr string) {
	if socket == "" {
		return nil, "no podman socket given (--podman): containers not listed"
	}
	p, err := podman.New(ctx, socket, nil)
	if err == nil {
		observed, err = p.List(ctx)
	}
	if err != nil {
		listErr = err.Error()
	}
	return observed, listErr
}

// printMigrateNetworks prints the flag and the networks' table.
func printMigrateNetworks(w io.Writer, st *migrations.State, auto migrations.AutoStatus) {
	paused := ""
	if st.Paused {
		paused = fmt.Sprintf(" (PAUSED since %s)", st.PausedAt.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "flag: %s%s\n\n", cmp.Or(string(st.Flag), "off"), paused)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tKIND\tMODE\tSTRATEGY\tUSED\tLAST PROBE\tRESULT\tREASON")
	names := make([]string, 0, len(st.Networks))
	for n, ns := range st.Networks {
		if ns.Present {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		ns := st.Networks[n]
		mode, strategy, at, res, reason := "copy", "-", "never", "-", ""
		if ns.Resolve {
			mode = "resolve"
		}
		if ns.Proven != nil {
			strategy = string(ns.Proven.Strategy)
		}
		if ns.Last != nil {
			at, reason = ns.Last.At.Format(time.RFC3339), ns.Last.Reason
			res = "pass"
			if !ns.Last.Pass {
				res = fmt.Sprintf("FAIL (%d in a row)", ns.Failures)
			}
		}
		if why := st.ProofMismatch(n); why != "" {
			reason = why // a proof of another address: not counted
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n, ns.Kind, mode, strategy, usedColumn(st, n), at, res, reason)
	}
	tw.Flush()
	if st.Flag == spec.FlagAuto {
		fmt.Fprintf(w, "\n%s\n", autoLine(auto))
	}
	fmt.Fprintln(w)
}

// printMigrateContainers prints the containers' table and their counts.
func printMigrateContainers(w io.Writer, containers []migrations.ContainerStatus) {
	counts := map[migrations.Phase]int{}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tNETWORKS\tCURRENT\tTARGET\tPHASE\tREASON")
	for _, c := range containers {
		counts[c.Phase]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, strings.Join(c.Networks, ","), cmp.Or(string(c.Current), "-"), c.Target, c.Phase, c.Reason)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d done, %d pending, %d failed\n", counts[migrations.PhaseDone], counts[migrations.PhasePending], counts[migrations.PhaseFailed])
}

// usedColumn says whether a declared container uses network n, as the
// state records the agent's declaration: "yes", "no" (it does not hold
// flag auto back) or "-" (not recorded yet).
func usedColumn(st *migrations.State, n string) string {
	switch {
	case st.Used == nil:
		return "-"
	case slices.Contains(st.Used, n):
		return "yes"
	}
	return "no"
}

// autoLine says what flag auto waits for, and what it does not.
func autoLine(a migrations.AutoStatus) string {
	var b strings.Builder
	switch {
	case !a.SwitchedAt.IsZero():
		fmt.Fprintf(&b, "auto: the machine switched at %s; each network is in resolve mode once its probe passes", a.SwitchedAt.UTC().Format(time.RFC3339))
	case len(a.Holding) > 0 && !a.UsedKnown:
		fmt.Fprintf(&b, "auto: the machine keeps copied names until every network passes its probe (no declaration recorded yet): waiting for %s", strings.Join(a.Holding, ", "))
	case len(a.Holding) > 0:
		fmt.Fprintf(&b, "auto: the machine keeps copied names until the networks its declared containers use pass their probe: waiting for %s", strings.Join(a.Holding, ", "))
	case a.Used == 0:
		b.WriteString("auto: no network the declared containers use is reported by the runtime yet")
	default:
		b.WriteString("auto: every network the declared containers use passed its probe; the machine switches at the agent's next pass")
	}
	if len(a.Unused) > 0 {
		them := "them"
		if len(a.Unused) == 1 {
			them = "it"
		}
		if a.SwitchedAt.IsZero() {
			fmt.Fprintf(&b, "\nauto: not waiting for %s: no declared container uses %s", strings.Join(a.Unused, ", "), them)
		} else {
			fmt.Fprintf(&b, "\nauto: no declared container uses %s: %s did not hold the switch back", strings.Join(a.Unused, ", "), them)
		}
		b.WriteString(" (a container declared there later keeps copied names until the network passes its probe)")
	}
	return b.String()
}
