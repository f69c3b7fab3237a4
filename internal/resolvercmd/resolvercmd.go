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
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/filewatch"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/netflag"
	"github.com/meshhost/meshhost/internal/plumbing/procmetrics"
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
	cache      CacheFlags
	metrics    string
	log        logging.Flags
}

// CacheFlags are the cache's flags, shared with `meshhost agent`.
type CacheFlags struct {
	Size           int
	MaxTTL, MaxNeg time.Duration
}

// Register adds --cache-size, --cache-max-ttl and --cache-max-negative-ttl
// to fs.
func (c *CacheFlags) Register(fs *flag.FlagSet) {
	fs.IntVar(&c.Size, "cache-size", resolver.DefaultCacheSize, "answers to outside names kept in the cache (at most 1232 bytes each); 0 disables the cache; SIGUSR1 empties it")
	fs.DurationVar(&c.MaxTTL, "cache-max-ttl", resolver.DefaultCacheMaxTTL, "longest time an outside answer is kept (its TTLs are capped to it); 0 disables the cache")
	fs.DurationVar(&c.MaxNeg, "cache-max-negative-ttl", resolver.DefaultCacheMaxNegativeTTL, "longest time an NXDOMAIN or NODATA answer is kept (RFC 2308: its SOA's TTL and MINIMUM, capped to this); 0 keeps none")
}

// Apply sets cfg's cache fields from the flags: the flags' 0 (off) is the
// Config's negative.
func (c CacheFlags) Apply(cfg *resolver.Config) {
	off := func(v int64) int64 {
		if v <= 0 {
			return -1
		}
		return v
	}
	cfg.CacheSize = int(off(int64(c.Size)))
	cfg.CacheMaxTTL = time.Duration(off(int64(c.MaxTTL)))
	cfg.CacheMaxNegativeTTL = time.Duration(off(int64(c.MaxNeg)))
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
	f.cache.Register(fs)
	f.log.Register(fs)
	fs.StringVar(&f.metrics, "metrics", "", "`ADDR` (ip:port) to serve Prometheus metrics on, at /metrics, e.g. 127.0.0.1:9470 (default: none)")
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
	log, err := f.log.Logger(stderr)
	if err != nil {
		return 2, err // a flag's value
	}
	reg := procmetrics.NewRegistry()
	cfg := resolver.Config{
		Logger:          log,
		Registerer:      reg,
		TTL:             f.ttl,
		NegativeTTL:     f.neg,
		Upstreams:       f.upstreams,
		ResolvConf:      f.resolvConf,
		UpstreamTimeout: f.timeout,
		Allow:           f.allow,
		StatePath:       f.state,
	}
	f.cache.Apply(&cfg)
	srv, err := resolver.New(cfg)
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
	if f.metrics != "" {
		l, err := net.Listen("tcp", f.metrics)
		if err != nil {
			return 1, fmt.Errorf("--metrics: %w", err)
		}
		mctx, stopMetrics := context.WithCancel(ctx)
		served := make(chan struct{})
		go func() {
			if err := procmetrics.Serve(mctx, l, reg); err != nil {
				log.Error("metrics endpoint stopped", "err", err)
			}
			close(served)
		}()
		defer func() { stopMetrics(); <-served }()
		log.Info("metrics", "addr", l.Addr().String())
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	stopFlush := FlushOnSignal(ctx, srv)
	defer stopFlush()
	fmt.Fprintf(stderr, "%s: serving on %v\n", prog, srv.Listeners())

	for {
		select {
		case <-ctx.Done():
			return 0, nil
		case <-hup:
			if f.roster != "" {
				poke()
			}
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
		log.Info("roster file unchanged or older; keeping the served roster", "path", path, "detail", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("roster %q: %w", path, err)
	}
	log.Info("roster applied", "path", path, "roster_generation", r.Generation, "names", len(r.Names),
		"took", time.Since(start), "applied_unix_nano", time.Now().UnixNano())
	return nil
}

// FlushOnSignal empties srv's cache on each SIGUSR1 until ctx ends or the
// returned func is called (which waits for that).
func FlushOnSignal(ctx context.Context, srv *resolver.Server) (stop func()) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-usr1:
				srv.FlushCache()
			}
		}
	}()
	return func() {
		signal.Stop(usr1)
		cancel()
		<-done
	}
}
