package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	"github.com/meshhost/meshhost/internal/plumbing/flagfile"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/procmetrics"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func init() {
	register(command{name: "agent", summary: "run the host agent: resolver, migration gate and reconcile loop", define: defineAgent})
}

func defineAgent(env *environment, fs *flag.FlagSet) runner {
	f := defineAgentFlags(fs)
	return func(ctx context.Context, args []string) (int, error) {
		// First of all: a SIGHUP reloads, it never kills (its default action).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		c, err := f.check(ctx, env)
		if err != nil {
			return exitConfig, err
		}
		return runAgent(ctx, env, c, hup)
	}
}

// runAgent runs the agent of configuration c, in phases: the logger and
// metrics; the resolver (openResolver), which serves the saved roster
// before anything else answers; the declaration sources; health and the
// endpoints; and the runtime, waited for, then the agent's loop.
func runAgent(ctx context.Context, env *environment, c *agentConfig, hup <-chan os.Signal) (int, error) {
	level := new(slog.LevelVar)
	level.Set(c.Level)
	logger, err := logging.New(env.stderr, logging.Options{Format: c.LogFormat, Level: level})
	if err != nil {
		return exitConfig, fmt.Errorf("--log-format: %w", err)
	}
	routeLibraryLogs(logger)
	if len(c.IgnoredCache) > 0 {
		logger.Warn("the embedded resolver's cache flags are ignored with --resolver unix: (the resolver service keeps its own cache): give them to meshhost-resolver",
			"flags", strings.Join(c.IgnoredCache, ","))
	}
	c.PushAccess.Log = logger
	logger.Info("meshhost agent starting", "version", buildinfo.Get().Version, "resolver", c.ResolverAt, "runtime", c.Runtime)
	if err := c.State.Create(); err != nil {
		return 1, err
	}
	lock, err := c.State.Lock() // one agent a state directory
	if err != nil {
		return 1, err
	}
	defer lock.Unlock()
	reg := procmetrics.NewRegistry() // with meshhost_build_info
	depUp := newDependencyUp(reg)

	// Whatever ends the agent stops its goroutines, and waits for them.
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	defer func() { cancel(); g.Wait() }()

	res, err := openResolver(gctx, g, c, logger, reg, depUp)
	if err != nil {
		return 1, err
	}
	defer res.Close() // last: the resolver answers until the very end
	src, err := openSources(gctx, g, c, res, logger, reg)
	if err != nil {
		return 1, err
	}
	h := newAgentHealth(c, res)
	// READY=1 once the resolver answers; the watchdog follows this
	// process alone, not the resolver (see agent.Notify).
	g.Go(func() error { agent.Notify(gctx, logger, h.liveness); return nil })
	if err := serveEndpoints(gctx, g, c, src, h, logger, reg); err != nil {
		return 1, err
	}
	g.Go(func() error { reloadOnHUP(gctx, hup, c, level, src, res, logger); return nil })
	g.Go(func() error { return runRuntime(gctx, g, c, res, src, h, depUp, logger, reg) })
	err = g.Wait()
	logger.Info("agent stopped; containers are left running", "err", err)
	if err != nil && ctx.Err() == nil {
		return 1, err
	}
	return 0, nil
}

// newDependencyUp registers meshhost_agent_dependency_up on reg.
func newDependencyUp(reg prometheus.Registerer) *prometheus.GaugeVec {
	depUp := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshhost_agent_dependency_up",
		Help: "1 while a dependency answers the agent: podman (its API; asked every 10s once connected) and resolver (its control socket, asked every second; or the embedded one).",
	}, []string{"dependency"})
	depUp.WithLabelValues("podman")
	depUp.WithLabelValues("resolver")
	reg.MustRegister(depUp)
	return depUp
}

// agentSources are where declarations come from, and what the agent
// keeps of them: the saved one, the declaration source the file, push
// and NATS feed, the migration gate and the journal.
type agentSources struct {
	saved   *agent.Saved
	source  *declsource.Source
	nats    natsSource
	gate    *migrations.Gate
	journal *journal.Journal
}

// openSources opens the saved declaration, the declaration source (and
// its NATS watcher, run in g), the gate and the journal.
func openSources(ctx context.Context, g *errgroup.Group, c *agentConfig, res agentResolver, logger *slog.Logger, reg prometheus.Registerer) (*agentSources, error) {
	saved, err := agent.LoadSaved(c.State)
	if err != nil {
		// Saved by a meshhost that checked less (a name this one reserves,
		// say): refusing to start would leave the machine without an agent
		// until someone edits the state directory. Without it the resolver
		// serves its saved roster, no container is touched, and the next
		// declaration pushed or written takes over.
		logger.Error("the saved declaration is refused; no container is touched until a valid declaration arrives", "err", err)
		saved = nil
	}
	var initial *spec.Declaration
	if saved != nil {
		initial = saved.Declaration
	}
	source := declsource.New(declsource.Config{Machine: c.Machine, Initial: initial, Reader: specjson.Reader{Busy: res.Busy}, Logger: logger, Registerer: reg})
	// Inputs are judged against the roster the resolver serves from the
	// first one on, not from the agent's first pass, which waits for the
	// runtime: else a restart took a declaration reusing the served
	// roster's generation with other names (found by internal/testkit/sim).
	if r := res.Roster(); r != nil {
		source.SetServed(r.Generation, res.Roster)
	}
	if _, ok := source.Head(); !ok {
		saved = nil // not taken (another machine's): nothing to go on from
	}
	natsw, err := c.NATS.watcher(c.NATSURL, c.Machine, source, logger, reg)
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return natsw.run(ctx) })
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: c.State.Migrations(), Owner: c.Machine, Logger: logger, Registerer: reg, MaxProofAge: c.ProofMaxAge, NodeLocal: c.NodeLocal, Loopback: c.Loopback})
	if err != nil {
		return nil, err
	}
	jnl, err := journal.Open(c.State.Journal(), journal.Options{Logger: logger})
	if err != nil {
		return nil, err
	}
	return &agentSources{saved: saved, source: source, nats: natsw, gate: gate, journal: jnl}, nil
}

// agentHealth is what health says before and after the agent is made:
// until the runtime answers there is no agent, and health says why.
type agentHealth struct {
	res     agentResolver
	current atomic.Pointer[agent.Agent]
	waiting atomic.Pointer[error]
}

func newAgentHealth(c *agentConfig, res agentResolver) *agentHealth {
	h := &agentHealth{res: res}
	noRuntime := errors.New("starting the in-memory runtime")
	if c.PodmanURI != "" && c.Runtime == "podman" {
		noRuntime = fmt.Errorf("connecting to podman's API at %s: no answer yet", c.PodmanURI)
	}
	h.waiting.Store(&noRuntime)
	return h
}

// liveness is the agent's, or, before there is one, the resolver's.
func (h *agentHealth) liveness() error {
	if a := h.current.Load(); a != nil {
		return a.Liveness()
	}
	if err := h.res.Alive(); err != nil {
		return fmt.Errorf("the resolver does not answer: %w", err)
	}
	return nil
}

// handler serves /livez, /readyz, /healthz and /v1/report: the agent's
// once there is one. None of these waits for a pass in progress, nor on
// a socket.
func (h *agentHealth) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := h.current.Load(); a != nil {
			a.Handler().ServeHTTP(w, r)
			return
		}
		switch r.URL.Path {
		case "/livez":
			if err := h.liveness(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		case "/v1/report":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, "null")
		default:
			http.Error(w, (*h.waiting.Load()).Error(), http.StatusServiceUnavailable)
		}
	})
}

// serveEndpoints watches the declaration file, and serves the push
// endpoint and the metrics and health, each in g.
func serveEndpoints(ctx context.Context, g *errgroup.Group, c *agentConfig, src *agentSources, h *agentHealth, logger *slog.Logger, reg *prometheus.Registry) error {
	if c.Declaration != "" {
		g.Go(func() error {
			if err := src.source.WatchPath(ctx, c.Declaration); err != nil {
				logger.Error("watching the declaration; it is read again on SIGHUP", "path", c.Declaration, "err", err)
			}
			return nil
		})
	}
	if c.Push != "off" {
		addr := c.Push
		if addr == "" {
			addr = "unix:" + c.State.PushSocket()
		}
		l, err := declsource.Listen(addr, c.PushAccess)
		if err != nil {
			return err
		}
		logger.Info("push endpoint", "addr", addr)
		g.Go(func() error { return serveHTTP(ctx, l, l.Guard(src.source.Handler())) })
	}
	if c.HTTP == "off" {
		return nil
	}
	l, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", procmetrics.Handler(reg))
	for _, path := range []string{"/livez", "/readyz", "/healthz", "/v1/report"} {
		mux.Handle(path, h.handler())
	}
	logger.Info("metrics and health", "addr", l.Addr().String())
	g.Go(func() error { return serveHTTP(ctx, l, mux) })
	return nil
}

// reloadOnHUP reads the declaration and the log level again on each
// SIGHUP, until ctx ends.
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, c *agentConfig, level *slog.LevelVar, src *agentSources, res agentResolver, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		logger.Info("SIGHUP: reloading the declaration and the log level")
		if reload := c.levelSource(); reload != nil {
			if l, err := reload(); err != nil {
				logger.Error("SIGHUP: keeping the log level", "level", level.Level(), "err", err)
			} else if l != level.Level() {
				level.Set(l)
				logger.Info("log level", "new_level", l)
			}
		}
		if c.Declaration != "" {
			src.source.ReadPath(c.Declaration)
		}
		res.Reload()
	}
}

// runRuntime waits for the runtime (podman's API may be down, at boot or
// restarting: the agent waits for it, retrying, and never exits for it),
// then makes the agent and runs it.
func runRuntime(ctx context.Context, g *errgroup.Group, c *agentConfig, res agentResolver, src *agentSources, h *agentHealth, depUp *prometheus.GaugeVec, logger *slog.Logger, reg prometheus.Registerer) error {
	var rt reconcile.Runtime
	inPlace := true
	var nets agent.Networks
	var p *podman.Runtime
	if c.Runtime == "memory" {
		rt = memory.New(memory.Options{})
	} else {
		var ok bool
		if p, inPlace, ok = waitForPodman(ctx, c.PodmanURI, h, logger); !ok {
			return nil
		}
		depUp.WithLabelValues("podman").Set(1)
		g.Go(func() error { // the metric follows podman's API after the start too
			every(ctx, 10*time.Second, func() {
				vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if _, err := p.Version(vctx); err != nil {
					depUp.WithLabelValues("podman").Set(0)
				} else {
					depUp.WithLabelValues("podman").Set(1)
				}
			})
			return nil
		})
		rt, nets = p, p
	}
	a, err := newAgent(ctx, agentSetup{
		logger: logger, reg: reg, dir: c.State, machine: c.Machine, podman: p, runtime: rt, inPlace: inPlace, nets: nets,
		resolver: res, static: res.Static(), allow: c.Allow, nodeLocal: c.NodeLocal, loopback: c.Loopback,
		outside: c.Outside, outsideWant: c.OutsideWant, probeBinary: c.ProbeBinary,
		gate: src.gate, journal: src.journal, source: src.source,
		saved: src.saved, sourceHealth: src.nats.health, interval: c.Interval, budget: c.Budget, holdAbove: c.HoldAbove,
	})
	if err != nil {
		return err
	}
	h.current.Store(a)
	return a.Run(ctx)
}

// waitForPodman connects to podman's API at uri, retrying until it
// answers (false: ctx ended first); health says why meanwhile.
func waitForPodman(ctx context.Context, uri string, h *agentHealth, logger *slog.Logger) (*podman.Runtime, bool, bool) {
	for attempt := 1; ; attempt++ {
		p, inPlace, err := openPodman(ctx, uri, logger)
		if err == nil {
			return p, inPlace, true
		}
		err = fmt.Errorf("connecting to podman's API at %s: %w", uri, err)
		h.waiting.Store(&err)
		wait := agent.RetryWait(time.Second, 30*time.Second, attempt)
		logger.Error("podman's API does not answer; retrying (containers keep running, the resolver keeps answering)", "retry_in_seconds", wait.Seconds(), "err", err)
		select {
		case <-ctx.Done():
			return nil, false, false
		case <-time.After(wait):
		}
	}
}

// agentSetup is what newAgent makes an agent of.
type agentSetup struct {
	logger       *slog.Logger
	reg          prometheus.Registerer
	dir          statedir.Dir
	machine      string
	podman       *podman.Runtime // nil: the in-memory runtime
	runtime      reconcile.Runtime
	inPlace      bool
	nets         agent.Networks
	resolver     agentResolver
	static       []netip.AddrPort
	allow        []netip.Prefix
	nodeLocal    netip.Addr
	loopback     netip.Addr
	outside      string
	outsideWant  netip.Addr
	probeBinary  string
	gate         *migrations.Gate
	journal      *journal.Journal
	source       *declsource.Source
	saved        *agent.Saved
	sourceHealth func() error
	interval     time.Duration
	budget       reconcile.Budget
	holdAbove    int // --hold-above
}

// newAgent makes the agent once the runtime answers: the exposer and the
// prober (with podman), the reconciler with its saved budget.
func newAgent(ctx context.Context, s agentSetup) (*agent.Agent, error) {
	logger := s.logger
	var exposer *migrations.Exposer
	var newProber func(zone string) (agent.Prober, error)
	if p := s.podman; p != nil {
		// Probe containers an agent killed mid-probe left behind, before
		// this one probes anything.
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		if _, err := migrations.SweepProbes(sctx, p, s.machine, logger); err != nil {
			logger.Warn("sweeping probe containers left behind", "err", err)
		}
		cancel()
		if !s.inPlace {
			logger.Info("this podman does not keep in-place resource updates across restarts (before 5.1): resource changes replace the container")
		}
		// The exposer is made here, not with the prober: the networks in
		// resolve mode are served from the first pass even when no prober
		// can be made. The --listen addresses are the operator's: never
		// closed when a network goes.
		var err error
		exposer, err = migrations.NewExposer(migrations.ExposerConfig{
			Resolver: s.resolver, NodeLocal: s.nodeLocal, Loopback: s.loopback, Allow: s.allow, Static: s.static, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		newProber = func(zone string) (agent.Prober, error) {
			if s.outside == "" {
				return nil, errors.New("no --probe-outside: the probe must prove that names outside the mesh still resolve through the resolver; give a name your upstream answers, e.g. --probe-outside example.org")
			}
			bin := s.probeBinary
			if bin == "" {
				if bin, err = migrations.FindProbeBinary(); err != nil {
					return nil, err
				}
			}
			image, err := migrations.ProbeImage(ctx, p, bin)
			if err != nil {
				return nil, err
			}
			migrations.PruneProbeImages(ctx, p, image, logger) // logs what it removes, and what it cannot
			return migrations.NewRunner(migrations.RunnerConfig{
				Runtime: p, Exposer: exposer, Image: image, Zone: zone,
				Outside: s.outside, OutsideWant: s.outsideWant, Logger: logger, Registerer: s.reg,
				Owner: s.machine, Canary: s.resolver.Canary,
			})
		}
	}
	// The machine's key for the hashes records and changes show for env
	// and label values (made on first use).
	hashKey, err := s.dir.LoadHashKey()
	if err != nil {
		return nil, err
	}
	rec, saveState, err := agent.OpenReconciler(reconcile.Config{
		Runtime: s.runtime, Owner: s.machine, NoInPlaceUpdates: !s.inPlace, Logger: logger, Registerer: s.reg,
		Budget: s.budget, HashKey: hashKey,
		// meshhost freeze, checked before every action that changes a container.
		Frozen: func() bool { f, _ := agent.Frozen(s.dir); return f != nil },
	}, s.dir.Reconciler(), logger)
	if err != nil {
		return nil, err
	}
	acfg := agent.Config{
		Runtime: s.runtime, Reconciler: rec, Resolver: s.resolver, Gate: s.gate, Source: s.source,
		Networks: s.nets, NewProber: newProber, Journal: s.journal, State: s.dir, Saved: s.saved,
		Interval: s.interval, HoldAbove: s.holdAbove, Logger: logger, Registerer: s.reg,
		AfterPass:     func(*agent.Report) { saveState() },
		ResolverAlive: s.resolver.Alive, Asserted: s.resolver.Settle, SourceHealth: s.sourceHealth,
	}
	if exposer != nil { // not a nil *Exposer in the interface
		acfg.Exposer = exposer
	}
	return agent.New(acfg)
}

// every runs f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// readLogLevel reads a log level from a file.
func readLogLevel(path string) (slog.Level, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	l, err := logging.ParseLevel(string(bytes.TrimSpace(data)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// configLogLevel is the log-level key of the configuration file at path,
// or the flag's default when the file does not set it. The whole file is
// checked, as at start: a file broken since then changes nothing.
func configLogLevel(fs *flag.FlagSet, path string) (slog.Level, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	values, err := flagfile.Values(fs, path, data, "config")
	if err != nil {
		return 0, err
	}
	text := fs.Lookup("log-level").DefValue
	for _, v := range values {
		if v.Key == "log-level" {
			text = v.Strings[0]
		}
	}
	l, err := logging.ParseLevel(text)
	if err != nil {
		return 0, fmt.Errorf("%s: log-level: %w", path, err)
	}
	return l, nil
}

// defaultMachine is the host name, as a machine name: lowercase, up to the
// first dot.
func defaultMachine() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(strings.ToLower(h), ".")
	return h
}

// serveHTTP serves until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler) error {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return s.Shutdown(sctx)
	case err := <-errc:
		return err
	}
}

// parseOutside reads --probe-outside: NAME, or NAME=ADDR.
func parseOutside(v string) (string, netip.Addr, error) {
	name, addr, ok := strings.Cut(v, "=")
	if !ok {
		return v, netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("--probe-outside %q: %q is not an address", v, addr)
	}
	return name, a, nil
}
