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
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshhost/meshhost/internal/filewatch"
	"github.com/meshhost/meshhost/internal/sdnotify"
	"github.com/meshhost/meshhost/internal/yield"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/resolver/handover"
	"github.com/meshhost/meshhost/spec"
)

// ErrUsage is wrapped by errors in the flags; the usage has been printed.
var ErrUsage = errors.New("usage")

// resolverFlags are the flags of the command.
type resolverFlags struct {
	roster     string
	listen     []netip.AddrPort
	upstreams  []netip.AddrPort
	allow      []netip.Prefix
	state      string
	resolvConf string
	ttl, neg   time.Duration
	timeout    time.Duration

	// The service's: see service.go.
	control     string
	controlMode os.FileMode
	controlUIDs []uint32
	stateDir    string
	handover    string
}

func parseFlags(prog string, stderr io.Writer, args []string) (*resolverFlags, error) {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &resolverFlags{}
	fs.StringVar(&f.roster, "roster", "", "roster `FILE` (JSON) to serve; reloaded on SIGHUP and when it changes")
	fs.Func("listen", "`ADDR[,ADDR...]` (ip:port) to serve over UDP and TCP; repeatable", func(s string) error {
		for _, part := range strings.Split(s, ",") {
			a, err := netip.ParseAddrPort(strings.TrimSpace(part))
			if err != nil {
				return fmt.Errorf("%q is not ip:port: %v", part, err)
			}
			f.listen = append(f.listen, a)
		}
		return nil
	})
	fs.Func("upstream", "upstream `ADDR` (ip or ip:port) for names outside the roster; repeatable (default: the nameservers of --resolv-conf)", func(s string) error {
		a, err := parseUpstream(s)
		if err != nil {
			return err
		}
		f.upstreams = append(f.upstreams, a)
		return nil
	})
	fs.Func("allow", "client `CIDR` to answer besides loopback; repeatable (others get REFUSED)", func(s string) error {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return fmt.Errorf("%q is not a CIDR: %v", s, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		f.allow = append(f.allow, p)
		return nil
	})
	fs.StringVar(&f.state, "state", "", "`PATH` keeping the last good roster across restarts (default: none, or STATE-DIR/roster.json)")
	fs.StringVar(&f.stateDir, "state-dir", "", "`DIR` keeping the last good roster (roster.json) and the exposure put on the control socket (exposure.json), served from the resolver's start")
	fs.StringVar(&f.control, "control", "", "control socket `PATH` through which the agent feeds the roster and the exposure (see resolver/control); off by default")
	f.controlMode = 0o600
	fs.Func("control-mode", "the control socket's file `MODE` (default 0600; 0660 lets the socket's group connect, if --control-uid admits them)", func(v string) error {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m&^0o777 != 0 {
			return fmt.Errorf("%q is not an octal file mode", v)
		}
		f.controlMode = os.FileMode(m)
		return nil
	})
	fs.Func("control-uid", "`UID` that may use the control socket besides root and the resolver's own user; repeatable", func(v string) error {
		u, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("%q is not a uid", v)
		}
		f.controlUIDs = append(f.controlUIDs, uint32(u))
		return nil
	})
	fs.StringVar(&f.handover, "handover", "", "handover socket `PATH`: a resolver started while another serves takes over its sockets there, and offers its own the same way; off by default")
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
	if f.stateDir != "" && f.state == "" {
		f.state = filepath.Join(f.stateDir, "roster.json")
	}
	if len(f.listen) == 0 && f.control == "" && f.stateDir == "" {
		fs.Usage()
		return nil, fmt.Errorf("--listen is required (or --control and --state-dir, for addresses the agent exposes), e.g. --listen 127.0.0.1:5353: %w", ErrUsage)
	}
	if f.roster == "" && f.state == "" && f.control == "" {
		fs.Usage()
		return nil, fmt.Errorf("--roster (or --state holding a saved roster, or --control for the agent to feed it) is required: %w", ErrUsage)
	}
	return f, nil
}

func parseUpstream(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddrPort(s); err == nil {
		return a, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is neither ip nor ip:port", s)
	}
	return netip.AddrPortFrom(a, 53), nil
}

// Run runs the command until ctx is done, or until it has handed its
// sockets over to a successor (--handover). It returns the process exit
// code: 2 for usage and flag errors, 1 for other errors (which it returns).
//
// The order is what keeps DNS answering through restarts: sockets inherited
// first (systemd's store, a running predecessor), then the saved roster,
// then every address served (inherited sockets, or bound afresh: the static
// --listen ones and the saved exposure's), and only then READY=1.
func Run(ctx context.Context, prog string, stderr io.Writer, args []string) (int, error) {
	f, err := parseFlags(prog, stderr, args)
	if err != nil {
		return 2, err // usage and flag errors
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
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
			AllowUIDs: f.controlUIDs, Version: Version, Logger: log,
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
		if err := reloadRoster(log, srv, f.roster); err != nil {
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
	if pending := awaitAnswering(ctx, srv.Listeners(), 10*time.Second); len(pending) > 0 {
		log.Error("some addresses of this machine do not answer the resolver's own query", "addrs", pending)
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
		})
	}
	s.storeAll()
	sdnotify.Notify(fmt.Sprintf("%s\nSTATUS=serving generation %d on %d addresses", sdnotify.Ready, srv.Generation(), len(srv.Listeners())))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fmt.Fprintf(stderr, "%s: serving on %v\n", prog, srv.Listeners())

	lctx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	wg.Go(func() {
		sdnotify.WatchdogLoop(lctx, log, func() error {
			srv.Listeners() // the listener registry is not wedged
			return nil
		})
	})
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
			if err := handover.Serve(lctx, s.handoverL, s, Version, log); err != nil && lctx.Err() == nil {
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
			// sockets stay in its store, and the next process answers
			// what queues in them meanwhile.
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.Drain(dctx)
			cancel()
			return 0, nil
		case <-s.handed:
			log.Info("handed over to the successor and drained; exiting")
			stopLoops()
			return 0, nil
		case <-hup:
			poke()
		case <-reload:
			if f.roster == "" {
				continue
			}
			if err := reloadRoster(log, srv, f.roster); err != nil {
				log.Error("roster refused; the previous one keeps serving", "err", err)
			}
		}
	}
}

// reloadRoster reads, validates and applies the roster file.
func reloadRoster(log *slog.Logger, srv *resolver.Server, path string) error {
	start := time.Now()
	data, err := yield.ReadFile(path) // a swap runs beside queries: read in steps
	if err != nil {
		return fmt.Errorf("reading roster: %w", err)
	}
	r, err := spec.ParseRoster(data)
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
	log.Info("roster applied", "path", path, "generation", r.Generation, "names", len(r.Names),
		"took", time.Since(start), "applied_unix_nano", time.Now().UnixNano())
	return nil
}
