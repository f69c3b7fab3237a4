// Command meshhost is the host agent of a container mesh and its operator
// commands. Run `meshhost help` for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/reconcile"
)

// command is one subcommand. Each lives in its own file and registers itself
// in init, so that commands can be added without touching this file.
type command struct {
	name    string
	summary string
	// run gets the arguments after the command name. It returns the process
	// exit code; errors it returns are printed and exit 1.
	run func(ctx context.Context, env *environment, args []string) (int, error)
}

// environment is what a command may touch of the process, so tests can run
// commands in-process.
type environment struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// openRuntime connects to the container runtime at uri (a --podman
	// flag, or its environment variables) for the commands that only read
	// it (plan, explain). Nil: podman. Tests give the runtime of an agent
	// they run in-process.
	openRuntime func(ctx context.Context, uri string) (rt reconcile.Runtime, inPlaceUpdates bool, err error)
}

// runtime connects to the container runtime at uri (see openRuntime).
func (env *environment) runtime(ctx context.Context, uri string) (reconcile.Runtime, bool, error) {
	if env.openRuntime != nil {
		return env.openRuntime(ctx, uri)
	}
	if uri == "" {
		return nil, false, errors.New("no podman socket: pass --podman or set MESHHOST_PODMAN_SOCKET")
	}
	rt, inPlace, err := openPodman(ctx, uri, nil)
	if err != nil {
		return nil, false, err
	}
	return rt, inPlace, nil
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("meshhost: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := &environment{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(run(ctx, env, os.Args[1:]))
}

func run(ctx context.Context, env *environment, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(env.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "meshhost: unknown command %q\n\n", args[0])
		usage(env.stderr)
		return 2
	}
	code, err := c.run(ctx, env, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(env.stderr, "%smeshhost %s: %v\n", logging.ErrorPrefix(env.stderr, env.getenv), c.name, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "meshhost keeps this machine's containers matching the mesh's declaration")
	fmt.Fprintln(w, "and serves the mesh's names to them.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: meshhost COMMAND [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `meshhost COMMAND -h` for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(env *environment, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("meshhost "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	return fs
}
