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
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	"github.com/meshhost/meshhost/internal/plumbing/filewatch"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/procmetrics"
	"github.com/meshhost/meshhost/internal/plumbing/sdnotify"
	"github.com/meshhost/meshhost/internal/plumbing/setaside"
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/resolver/handover"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// CacheFlags are the cache's flags, shared with `meshhost agent`.
type CacheFlags struct {
	Size           int
	MaxTTL, MaxNeg time.Duration
}

// Register adds --cache-size, --cache-max-ttl and --cache-max-negative-ttl
// to fs.
func (c *CacheFlags) Register(fs *flag.FlagSet) {
	fs.IntVar(&c.Size, "cache-size", resolver.DefaultCacheSize, "answers to outside names kept in the cache (at most 1232 bytes each); 0 disables the cache; SIGUSR1 to the process that runs the resolver empties it")
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

// serve runs the resolver c's flags configure (checked by c.check) until
// ctx is done, or until it has handed its sockets over to a successor
// (--handover). It returns the process exit code, 0 or 1 (with the error).
//
// The order is what keeps DNS answering through restarts: sockets inherited
// first (systemd's store, a running predecessor), then the saved roster,
// then every address served (inherited sockets, or bound afresh: the static
// --listen ones and the saved exposure's), and only then READY=1.
func (c *Command) serve(ctx context.Context, stderr io.Writer, log *slog.Logger) (code int, err error) {
	prog, f := c.Prog, c.f
	// Signals first, before anything that takes time (a predecessor's
	// handover, a large saved roster): Go's default for SIGHUP is to exit,
	// and a reload (`systemctl reload`, a log rotation) may come at any
	// moment. SIGHUP reloads once serving; SIGTERM and SIGINT stop.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	hup := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				if sig != syscall.SIGHUP {
					stop()
					continue
				}
				select {
				case hup <- struct{}{}:
				default: // one reload pending is enough
				}
			}
		}
	}()

	// What libraries write through Go's log package (net/http's servers)
	// is the logger's too: JSON in JSON mode, with its priority under the
	// journal.
	slog.SetDefault(log)
	if f.log.Format == logging.JSON {
		// Every line JSON: the error the command ends with too.
		defer func() {
			if err != nil {
				log.Error(prog+" stopped", "err", err)
				err = &logging.LoggedError{Err: err}
			}
		}()
	}
	reg := procmetrics.NewRegistry()
	if f.rosterState != "" {
		// The saved roster's log, set aside when damaged (deltalog).
		reg.MustRegister(setaside.New(filepath.Dir(f.rosterState), []string{filepath.Base(resolver.LogPath(f.rosterState))}, setaside.Glob(resolver.LogPath(f.rosterState))))
	}
	if f.stateDir != "" {
		if err := os.MkdirAll(f.stateDir, 0o700); err != nil {
			return 1, fmt.Errorf("state directory: %w", err)
		}
	}
	in, succ := takeSockets(ctx, f, log)
	defer in.closeRest()
	abort := func() {
		if succ != nil {
			succ.Abort() // the predecessor serves on
		}
	}
	cfg := resolver.Config{
		Logger:          log,
		Registerer:      reg,
		TTL:             f.ttl,
		NegativeTTL:     f.neg,
		Upstreams:       f.upstreams,
		ResolvConf:      f.resolvConf,
		UpstreamTimeout: f.timeout,
		Allow:           f.allow,
		StatePath:       f.rosterState,
	}
	f.cache.Apply(&cfg)
	srv, err := resolver.New(cfg)
	if err != nil {
		abort()
		return 1, err
	}
	defer srv.Close()
	s := &service{f: f, log: log, srv: srv, handed: make(chan struct{})}
	var exposed []netip.AddrPort
	if f.control != "" || f.stateDir != "" {
		var xpath string
		if f.stateDir != "" {
			xpath = filepath.Join(f.stateDir, "exposure.json")
		}
		s.ctl, err = control.NewServer(control.Config{
			Resolver: srv, ExposurePath: xpath, Static: f.listen, StaticAllow: f.allow,
			AllowUIDs: f.controlUIDs, Version: buildinfo.Get().Version, Logger: log,
			ListenersChanged: s.listenersChanged,
		})
		if err != nil {
			abort()
			return 1, err
		}
		exposed = s.ctl.Exposure().Listen
	}

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
			abort()
			return 1, fmt.Errorf("watching %q: %w", f.roster, err)
		}
		wctx, stopWatch := context.WithCancel(ctx)
		watching := make(chan struct{})
		go func() { w.Run(wctx, 20*time.Millisecond, poke); close(watching) }()
		defer func() { stopWatch(); <-watching }()
		if err := ReloadRoster(log, srv, f.roster); err != nil {
			if !srv.Serving() {
				abort()
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
	if s.ctl != nil {
		// The handed-over sockets hold queries of the exposed networks'
		// clients already: they are allowed before the first is read.
		s.ctl.ApplyClients()
	}
	// The metrics endpoint never stops the resolver from serving: a
	// successor binds it once its predecessor, which holds the port, has
	// drained (see succ.Serving below), and a port taken is retried in the
	// background.
	mctx, stopMetrics := context.WithCancel(ctx)
	var metricsWG sync.WaitGroup
	defer func() { stopMetrics(); metricsWG.Wait() }()
	var metricsOnce sync.Once
	startMetrics := func() {
		if f.http == "" || f.http == "off" {
			return
		}
		metricsOnce.Do(func() {
			metricsWG.Go(func() {
				serveMetrics(mctx, log, f.http, func(l net.Listener) error { return procmetrics.Serve(mctx, l, reg) })
			})
		})
	}
	if succ == nil {
		startMetrics()
	}
	if err := s.adoptListeners(in, f.listen, exposed); err != nil {
		abort()
		return 1, err
	}
	if s.ctl != nil {
		s.ctl.Start() // failures are logged, and retried below
	}
	if err := s.openSockets(in); err != nil {
		abort()
		return 1, err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.controlL != nil {
		wg.Go(func() {
			if err := s.ctl.Serve(s.controlL); err != nil {
				log.Error("control server", "err", err)
			}
		})
		defer s.ctl.Shutdown(context.Background())
		log.Info("control socket", "path", f.control)
	}
	// READY=1 once every address of this machine served answers, or after
	// readyPatience, saying which do not (see readyPatience for why).
	answer := func(a netip.AddrPort) bool { return answers(a, 500*time.Millisecond) }
	silent := awaitAnswering(ctx, checkable(srv.Listeners()), readyPatience, answer)
	if len(silent) > 0 && ctx.Err() == nil {
		log.Error("READY=1 although some addresses of this machine do not answer the resolver's own query after "+readyPatience.String()+
			" (a firewall dropping the host's queries to itself?); the others are served, and these are checked every second", "addrs", silent)
	}
	if ctx.Err() != nil {
		// Stopped before it served: a predecessor serves on, and the
		// sockets in systemd's store stay there.
		sdnotify.Notify(sdnotify.Stopping)
		abort()
		return 0, nil
	}
	if succ != nil {
		// Serving now: the predecessor stops reading and drains.
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := succ.Serving(sctx); err != nil {
				log.Warn("the predecessor's handover", "err", err)
			} else {
				log.Info("the predecessor drained and is gone")
			}
			startMetrics() // its port is free, or about to be
		})
	}
	s.storeAll()
	status := func(silent []netip.AddrPort) string {
		return readyStatus(srv.Generation(), len(srv.Listeners()), silent)
	}
	sdnotify.Notify(sdnotify.Ready + "\nSTATUS=" + status(silent))
	stopFlush := FlushOnSignal(ctx, srv)
	defer stopFlush()
	if f.log.Format == logging.JSON {
		log.Info(prog+": serving on", "listen", fmt.Sprint(srv.Listeners()))
	} else {
		fmt.Fprintf(stderr, "%s: serving on %v\n", prog, srv.Listeners())
	}

	lctx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	wg.Go(func() {
		sdnotify.WatchdogLoop(lctx, log, func() error {
			srv.Listeners() // the listener registry is not wedged
			return nil
		})
	})
	if len(silent) > 0 {
		wg.Go(func() {
			watchSilent(lctx, log, silent, srv.Listeners, answer, status, func(st string) { sdnotify.Notify(st) })
		})
	}
	if s.ctl != nil {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-lctx.Done():
					return
				case <-tick.C:
					s.ctl.Retry()
				}
			}
		})
	}
	if s.handoverL != nil {
		wg.Go(func() {
			if err := handover.Serve(lctx, s.handoverL, s, buildinfo.Get().Version, log); err != nil && lctx.Err() == nil {
				log.Error("handover socket", "err", err)
			}
		})
	}

	for {
		select {
		case <-ctx.Done():
			sdnotify.Notify(sdnotify.Stopping)
			stopLoops()
			if s.ctl != nil {
				s.ctl.Shutdown(context.Background())
			}
			// Stop reading and answer what was read: under systemd the
			// sockets stay in its store, and the next process, started
			// once this one is gone, answers what queues in them
			// meanwhile; so this one goes at once (see drainHanded).
			grace := drainAlone
			if s.inStore.Load() {
				grace = drainHanded
			}
			dctx, cancel := context.WithTimeout(context.Background(), grace)
			srv.Drain(dctx)
			cancel()
			return 0, nil
		case <-s.handed:
			log.Info("handed over to the successor and drained; exiting")
			stopLoops()
			return 0, nil
		case <-hup:
			if f.roster != "" {
				poke()
			}
		case <-reload:
			if f.roster == "" {
				continue
			}
			if err := ReloadRoster(log, srv, f.roster); err != nil {
				log.Error("roster refused; the previous one keeps serving", "err", err)
			}
		}
	}
}

// ReloadRoster reads, validates and applies the roster file at path,
// judged against the roster srv serves by package admit: the same roster
// again is no fault and changes nothing (logged "roster file unchanged");
// an older one, or the served generation with other names, is refused with
// an *admit.Error.
func ReloadRoster(log *slog.Logger, srv *resolver.Server, path string) error {
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
	// A generation names one roster, and generations never go back: the
	// file may repeat the served roster (a touch, a SIGHUP), and anything
	// else is refused, saying what differs (admit.ServedRoster).
	what := fmt.Sprintf("roster %q", path)
	dec := admitRoster(srv, what, r)
	if dec.Verdict == admit.Accepted {
		err = srv.Update(r)
		if errors.Is(err, resolver.ErrStaleGeneration) { // another roster came first
			dec = admitRoster(srv, what, r)
		}
	}
	switch {
	case dec.Verdict == admit.Same:
		log.Info("roster file unchanged; keeping the served roster", "path", path, "roster_generation", r.Generation)
		return nil
	case dec.Verdict == admit.Refused:
		return dec.Err()
	case err != nil:
		return fmt.Errorf("roster %q: %w", path, err)
	}
	log.Info("roster applied", "path", path, "roster_generation", r.Generation, "names", len(r.Names),
		"duration_seconds", time.Since(start).Seconds(), "applied_unix_nano", time.Now().UnixNano())
	return nil
}

// admitRoster judges r against the roster srv serves (admit.ServedRoster).
func admitRoster(srv *resolver.Server, what string, r *spec.Roster) admit.Decision {
	return admit.ServedRoster(what, r, srv.Generation(), func() []string { return srv.Differences(r, 10) })
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

// Retries of the metrics endpoint's port: the first soon (a predecessor
// frees it moments after it drained), then less often.
const (
	metricsRetryMin = 50 * time.Millisecond
	metricsRetryMax = 5 * time.Second
	// metricsPatience is how long the port may stay taken before it is
	// logged: a predecessor's exit takes less.
	metricsPatience = 3 * time.Second
)

// serveMetrics listens on addr and serves it until ctx ends. While the
// port is taken (a predecessor still exiting, another process) it retries
// in the background, logging it once the wait outlasts metricsPatience:
// the resolver serves DNS meanwhile, and metrics never stop it.
func serveMetrics(ctx context.Context, log *slog.Logger, addr string, serve func(net.Listener) error) {
	start := time.Now()
	wait, warned, tries := metricsRetryMin, false, 0
	for {
		tries++
		l, err := net.Listen("tcp", addr)
		if err == nil {
			if warned {
				log.Info("metrics: listening at last", "addr", l.Addr().String(), "tries", tries, "duration_seconds", time.Since(start).Seconds())
			} else {
				log.Info("metrics", "addr", l.Addr().String())
			}
			if err := serve(l); err != nil {
				log.Error("metrics endpoint stopped", "err", err)
			}
			return
		}
		if !warned && time.Since(start) >= metricsPatience {
			log.Warn("metrics: cannot listen yet; retrying in the background (DNS is served meanwhile)", "addr", addr, "err", err)
			warned = true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, metricsRetryMax)
	}
}
