package main

import (
	"context"
	"flag"

	"github.com/spf13/cobra"

	"github.com/meshhost/meshhost/internal/resolvercmd"
)

func init() {
	register(command{name: "resolver", use: "[config check] --roster FILE --listen ADDR [flags]", summary: "serve a roster file's names over DNS, alone",
		long: "The same command is installed alone as meshhost-resolver (without the podman client),\n" +
			"which meshhost-resolver.service runs with --config " + resolvercmd.DefaultConfig + ": the resolver\n" +
			"of every container in resolve mode. `meshhost resolver config check --config FILE` checks\n" +
			"a configuration as the resolver checks it at its start (a refused one exits 78).",
		args:   func(_ *cobra.Command, args []string) error { return resolvercmd.CheckArgs(args) },
		valid:  []string{"config"},
		define: defineResolver,
	})
}

// defineResolver is `meshhost resolver`: the command of
// internal/resolvercmd, whose flags meshhost's library parses here as it
// does every command's (and cmd/meshhost-resolver the same way).
func defineResolver(env *environment, fs *flag.FlagSet) runner {
	c := resolvercmd.New("meshhost resolver", fs)
	return func(ctx context.Context, args []string) (int, error) {
		code, err := c.Main(ctx, env.stdout, env.stderr, args, givenFlags(ctx))
		if code == resolvercmd.ExitUsage {
			return exitUsage, usageError{err}
		}
		return code, err
	}
}
