// Command meshhost is the host agent of a container mesh and its operator
// commands. Run `meshhost help` for the list.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Exit codes, the same for every command (docs/operator.md's table, "The command line").
const (
	exitOK      = 0
	exitError   = 1
	exitChanges = 2  // meshhost plan: the plan has changes
	exitProbe   = 3  // meshhost probe, dns-check: a probe or a lookup failed
	exitUsage   = 64 // a flag, an argument or a value the command does not take (sysexits' EX_USAGE)
	exitConfig  = 78 // meshhost agent, config check: the configuration is refused (sysexits' EX_CONFIG); the units do not restart the agent for it
)

// command is one subcommand. Each lives in its own file and registers itself
// in init, so that commands can be added without touching this file.
type command struct {
	name    string
	summary string
	// use is what follows the name in the usage line: "CONTAINER NAME".
	use string
	// long is the help's description, when the summary is not enough.
	long string
	// args checks the positional arguments; nil takes none.
	args cobra.PositionalArgs
	// valid lists the values the first argument takes, for completion.
	valid []string
	// hidden keeps the command out of the help (meshhost man, for make man).
	hidden bool
	// define defines the command's flags on fs and returns what runs once
	// they are parsed, with the positional arguments. What it returns is
	// the exit code (the table above); an error is printed (as JSON with
	// --output json) and exits 1 unless the code says otherwise.
	define func(env *environment, fs *flag.FlagSet) runner
}

// runner runs a command with its positional arguments.
type runner func(ctx context.Context, args []string) (int, error)

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
	// defaultConfig is where operator commands look for the agent's
	// configuration without --config; "": defaultConfig, the package's.
	defaultConfig string
}

// agentConfig is the agent's configuration file operator commands read
// when not told (see operatorConfig).
func (env *environment) agentConfig() string {
	if env.defaultConfig != "" {
		return env.defaultConfig
	}
	return defaultConfig
}

// runtime connects to the container runtime at uri (see openRuntime).
func (env *environment) runtime(ctx context.Context, uri string) (reconcile.Runtime, bool, error) {
	if env.openRuntime != nil {
		return env.openRuntime(ctx, uri)
	}
	if uri == "" {
		return nil, false, errNoPodman
	}
	rt, inPlace, err := openPodman(ctx, uri, nil)
	if err != nil {
		return nil, false, err
	}
	return rt, inPlace, nil
}

// errNoPodman is the error of every command that needs podman and was
// told of no socket: a dependency missing, exit 1 (not a usage error: the
// command line may be right, and the environment lack the variable).
var errNoPodman = errors.New("no podman socket: pass --podman unix:///run/podman/podman.sock or set MESHHOST_PODMAN_SOCKET")

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

// usageError is an error in how a command was called: it exits 64.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// checkOutput refuses an --output other than text or json.
func checkOutput(output string) error {
	if output != "text" && output != "json" {
		return usagef("--output %q: want text or json", output)
	}
	return nil
}

// outcome is what the command that ran said.
type outcome struct {
	ran  bool // a command's own code ran (not only cobra's parsing)
	code int
}

// run runs the command line args and returns the process's exit code.
func run(ctx context.Context, env *environment, args []string) int {
	var out outcome
	root := newRoot(ctx, env, &out)
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return out.code
	}
	code := out.code
	var ue usageError
	switch {
	case !out.ran, errors.As(err, &ue):
		// cobra's own errors (an unknown command or flag, wrong
		// arguments) come before the command runs.
		code = exitUsage
	case code == exitOK:
		code = exitError
	}
	printError(env, cmd, err, code == exitUsage, wantsJSON(args))
	return code
}

// wantsJSON reports whether the command line asks for --output json, for
// an error found before its flags were all parsed.
func wantsJSON(args []string) bool {
	for i, a := range args {
		if a == "--output=json" || a == "--output" && i+1 < len(args) && args[i+1] == "json" {
			return true
		}
	}
	return false
}

// printError prints err for cmd: as {"error": ..., "faults": [...]} on
// stdout when its --output is json (or asJSON), else on stderr.
func printError(env *environment, cmd *cobra.Command, err error, usage, asJSON bool) {
	if f := cmd.Flags().Lookup("output"); asJSON || f != nil && f.Value.String() == "json" {
		out := struct {
			Error  string            `json:"error"`
			Faults []spec.FieldError `json:"faults"`
		}{err.Error(), spec.Faults(err)}
		json.NewEncoder(env.stdout).Encode(out)
		return
	}
	if logging.IsLogged(err) {
		return // the command logged it (meshhost resolver --log-format json)
	}
	if f := cmd.Flags().Lookup("log-format"); f != nil && f.Value.String() == logging.JSON {
		// Every line JSON in JSON mode: the error the command ends with too.
		if l, lerr := logging.New(env.stderr, logging.Options{Format: logging.JSON}); lerr == nil {
			l.Error(cmd.CommandPath()+" stopped", "err", err)
			return
		}
	}
	fmt.Fprintf(env.stderr, "%s%s: %v\n", logging.ErrorPrefix(env.stderr, env.getenv), cmd.CommandPath(), err)
	if usage {
		fmt.Fprintf(env.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}

// newRoot returns the meshhost command with every registered command;
// out receives what the one that runs says.
func newRoot(ctx context.Context, env *environment, out *outcome) *cobra.Command {
	root := &cobra.Command{
		Use:   "meshhost",
		Short: "keep this machine's containers matching the mesh's declaration, and serve the mesh's names to them",
		Long: "meshhost keeps this machine's containers matching the mesh's declaration\n" +
			"and serves the mesh's names to them.\n\n" +
			"Exit codes: 0 ok, 1 error, 2 the plan has changes (plan), 3 a probe or\n" +
			"lookup failed (probe, dns-check), 64 usage, 78 the configuration is refused\n" +
			"(agent, config check, resolver).",
		Version:       buildinfo.Get().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(env.stdout)
	root.SetErr(env.stderr)
	root.SetContext(ctx)
	root.SetVersionTemplate("meshhost {{.Version}}\n")
	// meshhost completion is a command of its own (completion.go), which
	// refuses a shell it does not know; cobra's printed its help and
	// exited 0 for any word.
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		root.AddCommand(cobraCommand(env, commands[n], out))
	}
	return root
}

// cobraCommand makes c a cobra command: its flags defined by c.define on a
// flag set of the standard library, bridged to cobra's, so that help, the
// man pages and completion list them.
func cobraCommand(env *environment, c command, out *outcome) *cobra.Command {
	cc := &cobra.Command{
		Use:       strings.TrimSpace(c.name + " " + c.use),
		Short:     c.summary,
		Long:      strings.TrimSpace(c.summary + "\n\n" + c.long),
		Args:      argsOrUsage(c.args),
		ValidArgs: c.valid,
		Hidden:    c.hidden,
	}
	finish := func(code int, err error) error {
		var ue usageError
		if errors.As(err, &ue) {
			code = exitUsage
		}
		out.ran, out.code = true, code
		return err
	}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runIt := c.define(env, fs)
	fromAgent := addOperatorConfig(fs, operatorConfigKeys[c.name])
	cc.Flags().AddGoFlagSet(fs)
	cc.Flags().SortFlags = false
	addValueCompletion(cc)
	cc.RunE = func(cmd *cobra.Command, args []string) error {
		if f := cmd.Flags().Lookup("output"); f != nil {
			if err := checkOutput(f.Value.String()); err != nil {
				return finish(exitUsage, err)
			}
		}
		ctx := withGivenFlags(cmd)
		if fromAgent != nil {
			if err := fromAgent.apply(ctx, env); err != nil {
				return finish(exitConfig, err)
			}
		}
		return finish(runIt(ctx, args))
	}
	return cc
}

type givenFlagsKey struct{}

// withGivenFlags is cmd's context carrying the names of the flags its
// command line set. pflag sets the Go flag set's values directly, so the
// Go set's Visit sees none of them: `--config` needs them to let the
// command line win over the file (flagfile.Apply).
func withGivenFlags(cmd *cobra.Command) context.Context {
	given := map[string]bool{}
	cmd.Flags().Visit(func(f *pflag.Flag) { given[f.Name] = true })
	return context.WithValue(cmd.Context(), givenFlagsKey{}, given)
}

// givenFlags is the set withGivenFlags recorded, nil when none was (a Go
// flag set parsed on its own, whose Visit then tells).
func givenFlags(ctx context.Context) map[string]bool {
	given, _ := ctx.Value(givenFlagsKey{}).(map[string]bool)
	return given
}

// argsOrUsage is check with its errors made usage errors; nil takes no
// positional arguments.
func argsOrUsage(check cobra.PositionalArgs) cobra.PositionalArgs {
	if check == nil {
		check = cobra.NoArgs
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
