package main

import (
	"context"
	"flag"
	"slices"

	"github.com/meshhost/meshhost/internal/resolvercmd"
)

func init() {
	register(command{name: "resolver", use: "--roster FILE --listen ADDR [flags]", summary: "serve a roster file's names over DNS, alone",
		long: "The same command is installed alone as meshhost-resolver (without the podman client),\n" +
			"which meshhost-resolver.service runs: the resolver of every container in resolve mode.",
		raw:      runResolver,
		rawFlags: func() *flag.FlagSet { return resolvercmd.Flags("meshhost resolver") }})
}

// runResolver is `meshhost resolver`; the same command is built alone as
// cmd/meshhost-resolver, which parses its own flags: its help is written to
// stdout here, and a usage error exits 64 as every meshhost command's.
func runResolver(env *environment) runner {
	return func(ctx context.Context, args []string) (int, error) {
		if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "-help" }) {
			resolvercmd.Run(ctx, "meshhost resolver", env.stdout, []string{"-h"})
			return exitOK, nil
		}
		code, err := resolvercmd.Run(ctx, "meshhost resolver", env.stderr, args)
		if code == 2 { // resolvercmd's usage code
			if err == nil {
				err = flag.ErrHelp
			}
			return exitUsage, usageError{err}
		}
		return code, err
	}
}
