// Package resolvercmd is the command that runs the resolver alone, for
// operators and benchmarks: `meshhost resolver`, and the same command as its
// own small binary, `meshhost-resolver`, which does not link the podman
// client (the binary's pages of 800 packages made the resolver's resident
// size a third larger).
package resolvercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/filewatch"
	"github.com/meshhost/meshhost/internal/plumbing/netflag"
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec/specjson"
)

// ErrUsage is wrapped by errors in the flags; the usage has been printed.
var ErrUsage = errors.New("usage")

// resolverFlags are the flags of the command.
type resolverFlags struct {
	roster     string
	listen     netflag.AddrPorts
	upstreams  netflag.Upstreams
	allow      netflag.Prefixes
	state      string
	resolvConf string
	ttl, neg   time.Duration
	timeout    time.Duration
}

func parseFlags(prog string, stderr io.Writer, args []string) (*resolverFlags, error) {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &resolverFlags{}
	fs.StringVar(&f.roster, "roster", "", "roster `FILE` (JSON) to serve; reloaded on SIGHUP and when it changes")
	fs.Var(&f.listen, "listen", "`ADDR[,ADDR...]` (ip:port) to serve over UDP and TCP; repeatable")
	fs.Var(&f.upstreams, "upstream", "upstream `ADDR[,ADDR...]` (ip or ip:port) for names outside the roster; repeatable (default: the nameservers of --resolv-conf)")
	fs.Var(&f.allow, "allow", "client `CIDR[,CIDR...]` (or address) to answer besides loopback; repeatable (others get REFUSED)")
	fs.StringVar(&f.state, "state", "", "`PATH` keeping the last good roster across restarts (default: none)")
	fs.StringVar(&f.resolvConf, "resolv-conf", "/etc/resolv.conf", "`FILE` whose nameservers are the upstreams when --upstream is not given")
	fs.DurationVar(&f.ttl, "ttl", 5*time.Second, "TTL of roster answers")
	fs.DurationVar(&f.neg, "negative-ttl", 5*time.Second, "TTL of NXDOMAIN and NODATA answers")
	fs.DurationVar(&f.timeout, "upstream-timeout", 2*time.Second, "time to wait for one upstream")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: "+prog+" --roster FILE --listen ADDR[,ADDR...] [--upstream ADDR ...] [--allow CIDR ...] [--state PATH] [--ttl D]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves the roster's names over DNS and forwards other names upstream.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return nil, fmt.Errorf("unexpected arguments %q: %w", fs.Args(), ErrUsage)
	}
	if len(f.listen) == 0 {
		fs.Usage()
		return nil, fmt.Errorf("--listen is required, e.g. --listen 127.0.0.1:5353: %w", ErrUsage)
	}
	if f.roster == "" && f.state == "" {
		fs.Usage()
		return nil, fmt.Errorf("--roster (or --state holding a saved roster) is required: %w", ErrUsage)
	}
	return f, nil
}

// Run runs the command until ctx is done. It returns the process exit code:
// 2 for usage and flag errors, 1 for other errors (which it returns).
func Run(ctx context.Context, prog string, stderr io.Writer, args []string) (int, error) {
	f, err := parseFlags(prog, stderr, args)
	if err != nil {
		return 2, err // usage and flag errors
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	srv, err := resolver.New(resolver.Config{
		Logger:          log,
		TTL:             f.ttl,
		NegativeTTL:     f.neg,
		Upstreams:       f.upstreams,
		ResolvConf:      f.resolvConf,
		UpstreamTimeout: f.timeout,
		Allow:           f.allow,
		StatePath:       f.state,
	})
	if err != nil {
		return 1, err
	}
	defer srv.Close()

	// Watch before the first read, so that no change is missed between them.
	reload := make(chan struct{}, 1)
	poke := func() {
		select {
		case reload <- struct{}{}:
		default:
		}
	}
	if f.roster != "" {
		// Keep the roster in a directory of its own: the watch sees every
		// change in its directory (to catch atomic renames).
		w, err := filewatch.New(f.roster)
		if err != nil {
			return 1, fmt.Errorf("watching %q: %w", f.roster, err)
		}
		wctx, stopWatch := context.WithCancel(ctx)
		watching := make(chan struct{})
		go func() { w.Run(wctx, 20*time.Millisecond, poke); close(watching) }()
		defer func() { stopWatch(); <-watching }()
		if err := reloadRoster(log, srv, f.roster); err != nil {
			if !srv.Serving() {
				return 1, err
			}
			log.Error("roster file refused; serving the saved roster", "err", err)
		}
	}
	// Parsing the roster made garbage many times the compiled table: hand it
	// back before serving, so the resident size reflects the table. (Later
	// reloads leave this to the runtime's background scavenger, which does
	// not stall queries.)
	debug.FreeOSMemory()
	for _, a := range f.listen {
		if err := srv.Listen(a); err != nil {
			return 1, err
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fmt.Fprintf(stderr, "%s: serving on %v\n", prog, srv.Listeners())

	if f.roster == "" {
		<-ctx.Done()
		return 0, nil
	}
	for {
		select {
		case <-ctx.Done():
			return 0, nil
		case <-hup:
			poke()
		case <-reload:
			if err := reloadRoster(log, srv, f.roster); err != nil {
				log.Error("roster refused; the previous one keeps serving", "err", err)
			}
		}
	}
}

// reloadRoster reads, validates and applies the roster file.
func reloadRoster(log *slog.Logger, srv *resolver.Server, path string) error {
	start := time.Now()
	if fi, err := os.Stat(path); err == nil {
		if err := specjson.CheckSize(fi.Size()); err != nil { // refused before it is read
			return fmt.Errorf("roster %q: %w", path, err)
		}
	}
	data, err := yield.ReadFile(path, srv.Busy) // a swap runs beside queries: read in steps
	if err != nil {
		return fmt.Errorf("reading roster: %w", err)
	}
	r, err := specjson.Reader{Busy: srv.Busy}.ParseRoster(data)
	if err != nil {
		return fmt.Errorf("roster %q: %w", path, err)
	}
	err = srv.Update(r)
	if errors.Is(err, resolver.ErrStaleGeneration) {
		// A generation names one roster, and generations never go back:
		// the file may repeat the served roster (a touch, a SIGHUP), and
		// anything else is refused, saying what differs.
		served := srv.Generation()
		if r.Generation < served {
			return fmt.Errorf("roster %q: generation %d is older than generation %d, which is served; rosters never go back (write a newer generation)", path, r.Generation, served)
		}
		if diff := srv.Differences(r, 10); len(diff) > 0 {
			return fmt.Errorf("roster %q: generation %d is served with other names (%s); a changed roster needs a newer generation", path, r.Generation, strings.Join(diff, "; "))
		}
		log.Info("roster file unchanged; keeping the served roster", "path", path, "generation", r.Generation)
		return nil
	}
	if err != nil {
		return fmt.Errorf("roster %q: %w", path, err)
	}
	log.Info("roster applied", "path", path, "generation", r.Generation, "names", len(r.Names),
		"took", time.Since(start), "applied_unix_nano", time.Now().UnixNano())
	return nil
}
