package main

import (
	"context"

	"github.com/meshhost/meshhost/internal/resolvercmd"
)

func init() {
	register(command{name: "resolver", summary: "serve a roster file's names over DNS, alone", run: runResolver})
}

// runResolver is `meshhost resolver`; the same command is built alone as
// cmd/meshhost-resolver.
func runResolver(ctx context.Context, env *environment, args []string) (int, error) {
	return resolvercmd.Run(ctx, "meshhost resolver", env.stderr, args)
}
