// Command meshhost-resolver is `meshhost resolver` as a binary of its own:
// the same flags and behaviour, on the same command library (cobra's, help
// on stdout, 64 for usage, flags anywhere), without the podman client
// linked in, so a resolver run alone is a quarter of the size and resident
// memory.
//
//	meshhost-resolver [config check] [--config FILE] --roster FILE --listen ADDR[,ADDR...] [--upstream ADDR ...] [--allow CIDR ...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/resolvercmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Stdout, os.Stderr, os.Getenv, os.Args[1:])
	stop()
	os.Exit(code)
}

// usageError is an error in how the command was called: it exits 64.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run runs the command line args and returns the exit code.
func run(ctx context.Context, stdout, stderr io.Writer, getenv func(string) string, args []string) int {
	const prog = "meshhost-resolver"
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := resolvercmd.New(prog, fs)
	code := 0
	root := &cobra.Command{
		Use:   prog + " [config check] --roster FILE --listen ADDR[,ADDR...] [flags]",
		Short: "serve a roster's names over DNS, and forward other names upstream",
		Long: "Serves the roster's names over DNS and forwards other names upstream: the\n" +
			"resolver of every container in resolve mode, which meshhost-resolver.service\n" +
			"runs with --config " + resolvercmd.DefaultConfig + ". `" + prog + " config check` checks\n" +
			"the configuration as the resolver does at its start.\n\n" +
			"Exit codes: 0 ok, 1 error, 64 usage, 78 the configuration is refused.",
		Version:       buildinfo.Get().String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		ValidArgs:     []string{"config"},
		Args: func(_ *cobra.Command, args []string) error {
			if err := resolvercmd.CheckArgs(args); err != nil {
				return usageError{err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			given := map[string]bool{}
			cmd.Flags().Visit(func(f *pflag.Flag) { given[f.Name] = true })
			var err error
			code, err = c.Main(cmd.Context(), stdout, stderr, args, given)
			if code == resolvercmd.ExitUsage {
				return usageError{err}
			}
			return err
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.SetVersionTemplate(prog + " {{.Version}}\n")
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.Flags().AddGoFlagSet(fs)
	root.Flags().SortFlags = false
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return code
	}
	var ue usageError
	if errors.As(err, &ue) {
		code = resolvercmd.ExitUsage
	} else if code == 0 {
		code = 1
	}
	if !logging.IsLogged(err) {
		fmt.Fprintf(stderr, "%s%s: %v\n", logging.ErrorPrefix(stderr, getenv), prog, err)
		if code == resolvercmd.ExitUsage {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", prog)
		}
	}
	return code
}
