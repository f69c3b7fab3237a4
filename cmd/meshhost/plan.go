package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func init() {
	register(command{name: "plan", summary: "dry run: what a pass would do, and why (exit 0: nothing, 2: changes)", run: runPlan})
	register(command{name: "explain", summary: "why a container would be replaced, field by field, old and new", run: runExplain})
}

// planFlags are the flags plan and explain share.
type planFlags struct {
	declaration, state, socket, output *string
}

func addPlanFlags(fs *flag.FlagSet) planFlags {
	return planFlags{
		declaration: fs.String("declaration", "", "the declaration to plan for (default: the one the agent applied last, STATE/declaration.json)"),
		state:       fs.String("state", "/var/lib/meshhost", "the agent's state directory (migration state, saved declaration)"),
		socket:      fs.String("podman", "", "podman API socket (default $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST)"),
		output:      fs.String("output", "text", "output format: text or json"),
	}
}

// plan computes, without changing anything, what the agent's next pass
// would do for the declaration: the same gate, render and Plan.
func (f planFlags) plan(ctx context.Context, env *environment) (*reconcile.Plan, error) {
	var decl *spec.Declaration
	if *f.declaration != "" {
		data, err := os.ReadFile(*f.declaration)
		if err != nil {
			return nil, err
		}
		if decl, err = specjson.ParseDeclaration(data); err != nil {
			return nil, fmt.Errorf("%s: %w", *f.declaration, err)
		}
	} else {
		d, err := agent.LoadDeclaration(*f.state)
		if err != nil {
			return nil, err
		}
		if d == nil {
			return nil, fmt.Errorf("no declaration: pass --declaration FILE (the agent has applied none in %s)", *f.state)
		}
		decl = d
	}
	uri := podmanSocket(env, *f.socket)
	if uri == "" {
		return nil, errors.New("no podman socket: pass --podman or set MESHHOST_PODMAN_SOCKET")
	}
	rt, inPlace, err := openPodman(ctx, uri, nil)
	if err != nil {
		return nil, err
	}
	// The gate decides modes from the agent's migration state; work on a
	// copy so a dry run never writes it.
	scratch, err := os.MkdirTemp("", "meshhost-plan-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	if data, err := os.ReadFile(filepath.Join(*f.state, migrations.StateFile)); err == nil {
		if err := os.WriteFile(filepath.Join(scratch, migrations.StateFile), data, 0o600); err != nil {
			return nil, err
		}
	}
	gate, err := migrations.OpenGate(migrations.GateConfig{Dir: scratch})
	if err != nil {
		return nil, err
	}
	if err := gate.SetFlag(decl.MeshNames); err != nil {
		return nil, err
	}
	observed, err := rt.List(ctx)
	if err != nil {
		return nil, err
	}
	modes := gate.Modes(decl.Containers, observed)
	desired := make([]spec.Rendered, 0, len(decl.Containers))
	for _, c := range decl.Containers {
		r, err := spec.Render(c, decl.Roster, modes[c.Name])
		if err != nil {
			return nil, fmt.Errorf("rendering %q: %w", c.Name, err)
		}
		desired = append(desired, r)
	}
	// The agent's own view: its owner label and the containers it adopted.
	rstate, _ := loadReconcileState(filepath.Join(*f.state, reconcileStateFile), slog.New(slog.DiscardHandler))
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: decl.Machine, NoInPlaceUpdates: !inPlace, Adoptions: rstate.Adoptions, BudgetUsed: rstate.BudgetUsed})
	if err != nil {
		return nil, err
	}
	return rec.PlanObserved(ctx, desired, observed)
}

// actionJSON is one action of `meshhost plan --output json`.
type actionJSON struct {
	Kind      string          `json:"kind"`
	Container string          `json:"container"`
	Reason    string          `json:"reason,omitempty"`
	Changes   []digest.Change `json:"changes,omitempty"`
}

func runPlan(ctx context.Context, env *environment, args []string) (int, error) {
	fs := newFlagSet(env, "plan")
	f := addPlanFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *f.output != "text" && *f.output != "json" {
		return 2, fmt.Errorf("--output %q: want text or json", *f.output)
	}
	p, err := f.plan(ctx, env)
	if err != nil {
		return 1, err
	}
	changes := p.Changes()
	code := 0
	if len(changes) > 0 {
		code = 2
	}
	if *f.output == "json" {
		out := struct {
			Actions   []actionJSON `json:"actions"`
			Unmanaged int          `json:"unmanaged_left_alone"`
		}{Actions: []actionJSON{}, Unmanaged: p.Unmanaged}
		for _, a := range changes {
			out.Actions = append(out.Actions, actionJSON{string(a.Kind), a.Name, a.Reason, a.Changes})
		}
		return code, json.NewEncoder(env.stdout).Encode(out)
	}
	printPlan(env.stdout, p)
	return code, nil
}

func printPlan(w io.Writer, p *reconcile.Plan) {
	changes := p.Changes()
	if len(changes) == 0 {
		fmt.Fprintf(w, "nothing to do: %d containers match their declaration\n", len(p.Actions))
	}
	for _, a := range changes {
		fmt.Fprintf(w, "%-8s %s", a.Kind, a.Name)
		if a.Reason != "" {
			fmt.Fprintf(w, ": %s", a.Reason)
		}
		fmt.Fprintln(w)
	}
	if p.Unmanaged > 0 {
		fmt.Fprintf(w, "(%d containers not managed by meshhost are left alone)\n", p.Unmanaged)
	}
}

func runExplain(ctx context.Context, env *environment, args []string) (int, error) {
	fs := newFlagSet(env, "explain")
	f := addPlanFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: meshhost explain [flags] CONTAINER")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2, err
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2, errors.New("name one container")
	}
	name := pos[0]
	p, err := f.plan(ctx, env)
	if err != nil {
		return 1, err
	}
	for _, a := range p.Actions {
		if a.Name != name {
			continue
		}
		if *f.output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(actionJSON{string(a.Kind), a.Name, a.Reason, a.Changes})
		}
		fmt.Fprintf(env.stdout, "%s: %s", name, a.Kind)
		if a.Reason != "" {
			fmt.Fprintf(env.stdout, " (%s)", a.Reason)
		}
		fmt.Fprintln(env.stdout)
		for _, c := range a.Changes {
			fmt.Fprintf(env.stdout, "  %-12s %-7s %s\n", c.Field, c.Mutability, changeText(c))
		}
		return 0, nil
	}
	return 1, fmt.Errorf("%q is neither declared nor a managed container", name)
}

func changeText(c digest.Change) string {
	if len(c.Added)+len(c.Removed) > 0 {
		var parts []string
		for _, a := range c.Added {
			parts = append(parts, "+"+a)
		}
		for _, r := range c.Removed {
			parts = append(parts, "-"+r)
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("old %s  new %s", orDash(c.Old), orDash(c.New))
}

func orDash(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}
