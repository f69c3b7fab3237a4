package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshhost/meshhost/internal/demo"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/spec"
)

func init() {
	register(command{name: "demo", summary: "replay the incident in copy mode and in resolve mode, and count replacements", define: defineDemo})
}

// demoPrefix names everything the podman demo creates, so it can clean up.
const demoPrefix = "meshdemo-"

func defineDemo(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	usePodman := fs.Bool("podman", false, "run against real podman (one machine's worth of containers) instead of the in-memory runtime")
	socket := fs.String("podman-socket", "", "podman API socket (default: $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST)")
	machine := fs.String("machine", "ace", "with --podman: which machine of the mesh to run")
	image := fs.String("image", "localhost/meshhost-busybox:latest", "with --podman: the local image every container runs")
	budget := fs.Int("budget", reconcile.DefaultBudget.Max, "replacements allowed per machine per minute")
	return func(ctx context.Context, args []string) (int, error) {
		if *output != "text" && *output != "json" {
			return exitUsage, fmt.Errorf("--output %q: want text or json", *output)
		}
		progress := newProgress(env.stderr)
		defer progress.done()
		opts := demo.Options{
			Budget:   reconcile.Budget{Max: *budget, Window: time.Minute},
			Progress: progress.printf,
		}
		if *usePodman {
			uri := podmanSocket(env, *socket)
			if uri == "" {
				return 1, fmt.Errorf("--podman needs a podman socket: pass --podman-socket or set MESHHOST_PODMAN_SOCKET (scripts/podman-up prints it)")
			}
			opts.Machines = []string{*machine}
			opts.Budget = reconcile.Budget{Max: 1000, Window: time.Minute} // show the raw count; the budget is simulated in memory mode
			opts.Adapt = podmanDemoContainer(*image)
			opts.NewRuntime = func(string, spec.NameMode) (reconcile.Runtime, func(), error) {
				rt, err := podman.New(ctx, uri, nil)
				if err != nil {
					return nil, nil, err
				}
				return rt, func() { cleanupDemo(context.WithoutCancel(ctx), rt) }, nil
			}
		} else {
			opts.Simulated = true
			opts.NewRuntime = func(string, spec.NameMode) (reconcile.Runtime, func(), error) {
				return memory.New(memory.Options{}), func() {}, nil
			}
		}
		rows, err := demo.Run(ctx, opts)
		progress.done()
		if err != nil {
			return 1, err
		}
		if *output == "json" {
			if rows == nil {
				rows = []demo.Row{}
			}
			return 0, json.NewEncoder(env.stdout).Encode(rows)
		}
		printDemo(env.stdout, rows, *usePodman)
		return 0, nil
	}
}

func printDemo(w io.Writer, rows []demo.Row, real bool) {
	machines := demo.Machines(rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "action\tmode\t%s\treplaced\tcreated\tremoved\tconverged after\t\n", strings.Join(machines, "\t"))
	for _, r := range rows {
		total := 0
		cells := make([]string, len(machines))
		for i, m := range machines {
			cells[i] = fmt.Sprint(r.Replaced[m])
			total += r.Replaced[m]
		}
		created, removed := 0, 0
		for _, n := range r.Created {
			created += n
		}
		for _, n := range r.Removed {
			removed += n
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t\n", r.Action, r.Mode, strings.Join(cells, "\t"), total, created, removed, r.Converged)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Columns per machine: containers replaced (a new container ID under the same name), read from the runtime.")
	if !real {
		fmt.Fprintln(w, "Clock: simulated, one reconcile pass every 20s; each machine may replace 3 containers a minute.")
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		if len(r.Timeline) == 0 {
			continue
		}
		fmt.Fprintf(w, "timeline: %s (%s mode)\n", r.Action, r.Mode)
		for i, t := range r.Timeline {
			if i == 6 {
				fmt.Fprintf(w, "  ... %d more passes until every machine converged after %s\n", len(r.Timeline)-i, r.Converged)
				break
			}
			fmt.Fprintf(w, "  +%-8s %-7s replaced %2d, left to later passes by the budget %2d\n", t.At, t.Machine, t.Replaced, t.Deferred)
		}
		break // one timeline tells the story; the JSON output has them all
	}
}

// podmanDemoContainer makes a declared container runnable on this machine:
// a local image, no named volumes (the demo must leave nothing behind), the
// default network, and a name no real container has.
func podmanDemoContainer(image string) func(spec.Container) spec.Container {
	return func(c spec.Container) spec.Container {
		c.Name = demoPrefix + c.Name
		c.Image = image
		c.Command = []string{"sleep", "3600"}
		c.Mounts = nil
		c.Networks = nil
		c.StopTimeout = 5 * time.Second
		deps := make([]string, len(c.DependsOn))
		for i, d := range c.DependsOn {
			deps[i] = demoPrefix + d
		}
		c.DependsOn = deps
		return c
	}
}

// cleanupDemo removes every container the podman demo made.
func cleanupDemo(ctx context.Context, rt reconcile.Runtime) {
	list, err := rt.List(ctx)
	if err != nil {
		return
	}
	for _, o := range list {
		if strings.HasPrefix(o.Name, demoPrefix) && reconcile.ManagedBy(o, "") {
			_ = rt.Stop(ctx, o.ID, time.Second)
			_ = rt.Remove(ctx, o.ID)
		}
	}
}

func podmanSocket(env *environment, flagValue string) string {
	for _, v := range []string{flagValue, env.getenv("MESHHOST_PODMAN_SOCKET"), env.getenv("CONTAINER_HOST")} {
		if v != "" {
			return v
		}
	}
	return ""
}

// progress prints progress lines: rewritten in place on a terminal, plain
// lines otherwise (logs, CI).
type progress struct {
	w        io.Writer
	terminal bool
	dirty    bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.dirty = true
		return
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) done() {
	if p.dirty {
		fmt.Fprint(p.w, "\r\033[K")
		p.dirty = false
	}
}
