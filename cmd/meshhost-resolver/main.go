// Command meshhost-resolver is `meshhost resolver` as a binary of its own:
// the same flags and behaviour, without the podman client linked in, so a
// resolver run alone is a quarter of the size and resident memory.
//
//	meshhost-resolver --roster FILE --listen ADDR[,ADDR...] [--upstream ADDR ...] [--allow CIDR ...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/resolvercmd"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("meshhost-resolver " + buildinfo.Get().String())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := resolvercmd.Run(ctx, "meshhost-resolver", os.Stderr, os.Args[1:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil && !logging.IsLogged(err) {
		fmt.Fprintf(os.Stderr, "%smeshhost-resolver: %v\n", logging.ErrorPrefix(os.Stderr, os.Getenv), err)
	}
	if err != nil && code == 0 {
		code = 1
	}
	os.Exit(code)
}
