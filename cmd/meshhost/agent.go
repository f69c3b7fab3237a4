package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
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
	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	"github.com/meshhost/meshhost/internal/plumbing/flagfile"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/netflag"
	"github.com/meshhost/meshhost/internal/plumbing/procmetrics"
	"github.com/meshhost/meshhost/internal/resolvercmd"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func init() {
	register(command{name: "agent", summary: "run the host agent: resolver, migration gate and reconcile loop", define: defineAgent})
}

func defineAgent(env *environment, fs *flag.FlagSet) runner { return defineAgentChecked(env, fs, nil) }

// defineAgentChecked defines `meshhost agent` on fs. With checked set, its
// runner stops once the flags, the configuration file's among them, are
// read and checked, and passes checked the file's keys applied (`meshhost
// config check`).
func defineAgentChecked(env *environment, fs *flag.FlagSet, checked func(config string, keys []string)) runner {
	configPath := fs.String("config", "", "a configuration `FILE` (TOML) whose keys are this command's flags, e.g. /etc/meshhost/agent.toml; flags given here win over it; meshhost config check checks it")
	declPath := fs.String("declaration", "", "the declaration: a file, or a directory whose last *.json file is the declaration; watched for changes, and read again on SIGHUP")
	natsURL := fs.String("source", "", "a NATS JetStream roster source, nats://HOST:4222 (see --nats-*): the roster and this machine's declaration are watched in its buckets")
	natsOpts := addNATSFlags(fs)
	push := fs.String("push", "", "the controller's push endpoint: unix:/path.sock or a loopback ip:port (default unix:STATE/push.sock; \"off\" disables it)")
	var pushAuth pushFlags
	pushAuth.register(fs)
	httpAddr := fs.String("http", "127.0.0.1:9469", "where /metrics, /livez, /readyz (and /healthz, its old name) are served, on a loopback address unless --http-remote (\"off\" disables them)")
	httpRemote := fs.Bool("http-remote", false, "let --http listen on an address other machines can reach (it serves metrics and health, never a declaration's values)")
	machine := fs.String("machine", defaultMachine(), "this machine's name in the mesh: declarations for another machine are refused, and only containers it created are ever removed")
	stateDir := fs.String("state", statedir.Default, "state directory: saved declaration and roster, migration state, journal")
	runtimeKind := fs.String("runtime", "podman", "container runtime: podman, or memory (embedded, for trying the agent out)")
	socket := fs.String("podman", "", "podman API socket (default $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST); while it does not answer the agent waits for it, retrying")
	resolverAt := fs.String("resolver", "embedded", "where the resolver runs: \"embedded\" (in this process: containers lose DNS whenever the agent stops) or unix:PATH, the control socket of meshhost-resolver, which outlives the agent (packaging/systemd runs it so)")
	interval := fs.Duration("interval", 30*time.Second, "time between periodic passes (a failed pass is retried sooner: 1s, doubling up to this)")
	budget := fs.Int("budget", reconcile.DefaultBudget.Max, "replacements and removals allowed per budget window")
	holdAbove := fs.Int("hold-above", agent.DefaultHoldAbove, "hold a declaration whose plan would replace and remove more than `N` containers (together) until meshhost approve GEN (0 never holds)")
	window := fs.Duration("budget-window", reconcile.DefaultBudget.Window, "the replacement budget's window")
	nodeLocal := fs.String("node-local", migrations.DefaultNodeLocal, "the node-local resolver address (assigned to lo) for routed networks")
	loopback := fs.String("loopback", migrations.DefaultLoopback, "the loopback address (127.0.0.0/8) where the resolver serves aardvark-dns's forwarded queries, for DNS-enabled networks (podman 4.4 and later)")
	probeBinary := fs.String("probe-binary", "", "the meshprobe binary (default $"+migrations.EnvProbeBinary+", next to meshhost, or on $PATH)")
	proofMaxAge := fs.Duration("proof-max-age", migrations.DefaultMaxProofAge, "how old a passing probe may be and still switch a network to the resolver; older ones (an agent that could not probe since) wait for a new probe")
	probeOutside := fs.String("probe-outside", "", "a name outside the mesh the probe must resolve through the resolver's forwarding, as NAME or NAME=ADDR; required before any network can switch to the resolver")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logLevelFile := fs.String("log-level-file", "", "a `FILE` holding the log level (debug, info, warn or error), read at start and on SIGHUP; it overrides --log-level")
	var logFlags logging.Flags
	logFlags.RegisterFormat(fs)
	var upstreams netflag.Upstreams
	var listens netflag.AddrPorts
	var allow netflag.Prefixes
	fs.Var(&upstreams, "upstream", "upstream DNS server `ADDR[,ADDR...]` (ip or ip:port) for names outside the mesh; repeatable (default: /etc/resolv.conf); the embedded resolver's only")
	fs.Var(&listens, "listen", "extra resolver listen `ADDR[,ADDR...]` (ip:port); repeatable, e.g. 127.0.0.1:53 for the host itself")
	fs.Var(&allow, "allow", "extra resolver client `CIDR[,CIDR...]` (or address); repeatable; probed container networks and loopback are always allowed")
	var cache resolvercmd.CacheFlags
	cache.Register(fs)
	return func(ctx context.Context, args []string) (int, error) {
		// First of all: a SIGHUP reloads, it never kills (its default action).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)

		var applied []string
		if *configPath != "" {
			var err error
			if applied, err = flagfile.Apply(fs, *configPath, givenFlags(ctx), "config"); err != nil {
				return exitUsage, err
			}
		}
		if *holdAbove < 0 {
			return exitUsage, fmt.Errorf("--hold-above %d: want 0 (never hold) or more", *holdAbove)
		}
		var level slog.LevelVar
		if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
			return exitUsage, fmt.Errorf("--log-level: %w", err)
		}
		if *logLevelFile != "" {
			l, err := readLogLevel(*logLevelFile)
			if err != nil {
				return exitUsage, fmt.Errorf("--log-level-file: %w", err)
			}
			level.Set(l)
		}
		// external is the resolver's control socket; empty: embedded.
		external, err := agent.ParseResolverAt(*resolverAt)
		switch {
		case err != nil:
			return exitUsage, err
		case external != "" && len(upstreams) > 0:
			return exitUsage, errors.New("--upstream is the embedded resolver's: give meshhost-resolver its upstreams (its --upstream, or its --resolv-conf)")
		}
		// The embedded resolver's cache flags change nothing with a
		// resolver service (it keeps its own cache): said at the start,
		// not refused, so that a configuration that always set them does
		// not stop the agent after an upgrade.
		var ignoredCache []string
		if external != "" {
			set := maps.Clone(givenFlags(ctx)) // the command line's
			if set == nil {
				set = map[string]bool{}
			}
			fs.Visit(func(f *flag.Flag) { set[f.Name] = true }) // the configuration file's
			for _, name := range slices.Sorted(maps.Keys(set)) {
				if set[name] && strings.HasPrefix(name, "cache-") {
					ignoredCache = append(ignoredCache, "--"+name)
				}
			}
		}
		if *runtimeKind != "podman" && *runtimeKind != "memory" {
			return exitUsage, fmt.Errorf("--runtime %q: want podman or memory", *runtimeKind)
		}
		nl, err := netip.ParseAddr(*nodeLocal)
		if err != nil {
			return exitUsage, fmt.Errorf("--node-local: %w", err)
		}
		lo, err := netip.ParseAddr(*loopback)
		if err != nil {
			return exitUsage, fmt.Errorf("--loopback: %w", err)
		}
		outside, outsideWant, err := parseOutside(*probeOutside)
		if err != nil {
			return exitUsage, err
		}
		uri := ""
		if *runtimeKind == "podman" {
			if uri = podmanSocket(env, *socket); uri == "" {
				return exitError, errNoPodman // a dependency missing, as for every command
			}
		}
		logger, err := logging.New(env.stderr, logging.Options{Format: logFlags.Format, Level: &level})
		if err != nil {
			return exitUsage, fmt.Errorf("--log-format: %w", err)
		}
		if len(ignoredCache) > 0 {
			logger.Warn("the embedded resolver's cache flags are ignored with --resolver unix: (the resolver service keeps its own cache): give them to meshhost-resolver",
				"flags", strings.Join(ignoredCache, ","))
		}
		pushAccess, err := pushAuth.access(*push)
		if err != nil {
			return exitUsage, err
		}
		pushAccess.Log = logger
		if err := checkHTTP(*httpAddr, *httpRemote); err != nil {
			return exitUsage, err
		}
		if checked != nil {
			checked(*configPath, applied)
			return exitOK, nil
		}
		logger.Info("meshhost agent starting", "version", buildinfo.Get().Version, "resolver", *resolverAt, "runtime", *runtimeKind)
		dir := statedir.New(*stateDir)
		if err := dir.Create(); err != nil {
			return 1, err
		}
		reg := procmetrics.NewRegistry() // with meshhost_build_info
		depUp := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshhost_agent_dependency_up",
			Help: "1 while a dependency answers the agent: podman (its API; asked every 10s once connected) and resolver (its control socket, asked every second; or the embedded one).",
		}, []string{"dependency"})
		depUp.WithLabelValues("podman")
		depUp.WithLabelValues("resolver")
		reg.MustRegister(depUp)

		// Whatever ends the agent stops its goroutines, and waits for them.
		ctx, cancel := context.WithCancel(ctx)
		g, gctx := errgroup.WithContext(ctx)
		defer func() { cancel(); g.Wait() }()

		// The resolver comes first: it serves the saved roster before the
		// controller or the runtime answer anything. Embedded, it is this
		// process's; external, it runs on its own, and the agent only feeds it.
		var (
			res           agent.Resolver
			exposeTo      migrations.Resolver
			busy          func() bool
			resolverAlive func() error
			canary        func(context.Context, string) (netip.Addr, error)
			asserted      func() error
			client        *control.Client
			static        []netip.AddrPort
		)
		if external == "" {
			rcfg := resolver.Config{
				Logger: logger, Registerer: reg, Upstreams: upstreams, Allow: allow,
				StatePath: dir.Roster(),
				Forbidden: resolver.PodmanDNSGuard(),
			}
			cache.Apply(&rcfg)
			srv, err := resolver.New(rcfg)
			if err != nil {
				return 1, err
			}
			defer srv.Close() // last: the resolver answers until the very end
			defer resolvercmd.FlushOnSignal(ctx, srv)()
			for _, l := range listens {
				if err := srv.Listen(l); err != nil {
					return 1, fmt.Errorf("--listen %s: %w", l, err)
				}
			}
			if r := srv.Roster(); r != nil {
				logger.Info("serving the saved roster", "roster_generation", r.Generation, "names", len(r.Names))
			}
			res, exposeTo, busy, static = srv, srv, srv.Busy, srv.Listeners()
			depUp.WithLabelValues("resolver").Set(1)
			if *runtimeKind == "podman" {
				logger.Warn("the resolver runs in the agent's process: containers in resolve mode lose DNS whenever the agent stops or restarts; run meshhost-resolver and pass --resolver unix:PATH (README, Architecture)")
			}
		} else {
			client = control.NewClient(control.ClientConfig{Path: external, Logger: logger})
			res, exposeTo, static = client, client, listens
			resolverAlive = func() error {
				_, err := client.Alive()
				if err != nil {
					depUp.WithLabelValues("resolver").Set(0)
				} else {
					depUp.WithLabelValues("resolver").Set(1)
				}
				return err
			}
			canary, asserted = client.Canary, client.Settle
			g.Go(func() error { client.Watch(gctx, time.Second); return nil })
			g.Go(func() error { // the metric follows the resolver, probed or not
				every(gctx, time.Second, func() { resolverAlive() })
				return nil
			})
			// The operator's own addresses and clients, asserted at once; a
			// resolver not up yet gets them when it is (Watch puts them again).
			for _, l := range listens {
				if err := client.Listen(l); err != nil {
					logger.Warn("--listen: the resolver does not serve it yet", "addr", l, "err", err)
				}
			}
			if len(allow) > 0 {
				client.SetAllow(allow)
			}
			if err := client.Ping(2 * time.Second); err != nil {
				logger.Error("the resolver's control socket does not answer; serving nothing new until it does (the resolver, a process of its own, keeps answering containers)", "socket", external, "err", err)
			}
		}

		saved, err := agent.LoadSaved(dir)
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
		source := declsource.New(declsource.Config{Machine: *machine, Initial: initial, Reader: specjson.Reader{Busy: busy}, Logger: logger, Registerer: reg})
		if _, ok := source.Head(); !ok {
			saved = nil // not taken (another machine's): nothing to go on from
		}
		natsw, err := natsOpts.watcher(*natsURL, *machine, source, logger, reg)
		if err != nil {
			return exitUsage, err
		}
		g.Go(func() error { return natsw.run(gctx) })
		gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: *machine, Logger: logger, Registerer: reg, MaxProofAge: *proofMaxAge, NodeLocal: nl, Loopback: lo})
		if err != nil {
			return 1, err
		}
		jnl, err := journal.Open(dir.Journal(), journal.Options{})
		if err != nil {
			return 1, err
		}

		// Until the runtime answers there is no agent: health says why, the
		// declaration source and push endpoint take declarations, the resolver
		// serves on.
		var current atomic.Pointer[agent.Agent]
		var waiting atomic.Pointer[error]
		noRuntime := errors.New("starting the in-memory runtime")
		if uri != "" {
			noRuntime = fmt.Errorf("connecting to podman's API at %s: no answer yet", uri)
		}
		waiting.Store(&noRuntime)
		liveness := func() error {
			if a := current.Load(); a != nil {
				return a.Liveness()
			}
			if resolverAlive != nil {
				if err := resolverAlive(); err != nil {
					return fmt.Errorf("the resolver does not answer: %w", err)
				}
			}
			return nil
		}
		// READY=1 once the resolver answers; the watchdog follows this
		// process alone, not the resolver (see agent.Notify).
		g.Go(func() error { agent.Notify(gctx, logger, liveness); return nil })

		if *declPath != "" {
			g.Go(func() error {
				if err := source.WatchPath(gctx, *declPath); err != nil {
					logger.Error("watching the declaration; it is read again on SIGHUP", "path", *declPath, "err", err)
				}
				return nil
			})
		}
		if *push != "off" {
			addr := *push
			if addr == "" {
				addr = "unix:" + dir.PushSocket()
			}
			l, err := declsource.Listen(addr, pushAccess)
			if err != nil {
				return 1, err
			}
			logger.Info("push endpoint", "addr", addr)
			g.Go(func() error { return serveHTTP(gctx, l, l.Guard(source.Handler())) })
		}
		if *httpAddr != "off" {
			l, err := net.Listen("tcp", *httpAddr)
			if err != nil {
				return 1, fmt.Errorf("--http: %w", err)
			}
			mux := http.NewServeMux()
			mux.Handle("/metrics", procmetrics.Handler(reg))
			// None of these waits for a pass in progress, nor on a socket.
			waitingHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/livez" {
					if err := liveness(); err != nil {
						http.Error(w, err.Error(), http.StatusServiceUnavailable)
						return
					}
					fmt.Fprintln(w, "ok")
					return
				}
				if r.URL.Path == "/v1/report" {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintln(w, "null")
					return
				}
				http.Error(w, (*waiting.Load()).Error(), http.StatusServiceUnavailable)
			})
			for _, path := range []string{"/livez", "/readyz", "/healthz", "/v1/report"} {
				mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if a := current.Load(); a != nil {
						a.Handler().ServeHTTP(w, r)
						return
					}
					waitingHandler.ServeHTTP(w, r)
				}))
			}
			logger.Info("metrics and health", "addr", l.Addr().String())
			g.Go(func() error { return serveHTTP(gctx, l, mux) })
		}
		g.Go(func() error {
			for {
				select {
				case <-gctx.Done():
					return nil
				case <-hup:
				}
				logger.Info("SIGHUP: reloading the declaration and the log level")
				// The level's source, as at start: --log-level-file, else
				// --log-level on the command line (which stays), else the
				// configuration file's log-level (its default when the key
				// is gone).
				var reload func() (slog.Level, error)
				switch {
				case *logLevelFile != "":
					reload = func() (slog.Level, error) { return readLogLevel(*logLevelFile) }
				case *configPath != "" && !givenFlags(ctx)["log-level"]:
					reload = func() (slog.Level, error) { return configLogLevel(fs, *configPath) }
				}
				if reload != nil {
					if l, err := reload(); err != nil {
						logger.Error("SIGHUP: keeping the log level", "level", level.Level(), "err", err)
					} else if l != level.Level() {
						level.Set(l)
						logger.Info("log level", "new_level", l)
					}
				}
				if *declPath != "" {
					source.ReadPath(*declPath)
				}
				if client != nil {
					client.Sync()
				}
			}
		})

		g.Go(func() error {
			// The runtime. podman's API may be down (at boot, or restarting):
			// the agent waits for it, retrying, and never exits for it.
			var rt reconcile.Runtime
			inPlace := true
			var nets agent.Networks
			var p *podman.Runtime
			if *runtimeKind == "memory" {
				rt = memory.New(memory.Options{})
			} else {
				for attempt := 1; ; attempt++ {
					var err error
					p, inPlace, err = openPodman(gctx, uri, logger)
					if err == nil {
						break
					}
					err = fmt.Errorf("connecting to podman's API at %s: %w", uri, err)
					waiting.Store(&err)
					wait := agent.RetryWait(time.Second, 30*time.Second, attempt)
					logger.Error("podman's API does not answer; retrying (containers keep running, the resolver keeps answering)", "in", wait, "err", err)
					select {
					case <-gctx.Done():
						return nil
					case <-time.After(wait):
					}
				}
				depUp.WithLabelValues("podman").Set(1)
				g.Go(func() error { // the metric follows podman's API after the start too
					every(gctx, 10*time.Second, func() {
						vctx, cancel := context.WithTimeout(gctx, 5*time.Second)
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
			a, err := newAgent(gctx, agentSetup{
				logger: logger, reg: reg, dir: dir, machine: *machine, podman: p, runtime: rt, inPlace: inPlace, nets: nets,
				resolver: res, exposeTo: exposeTo, static: static, allow: allow, nodeLocal: nl, loopback: lo,
				outside: outside, outsideWant: outsideWant, probeBinary: *probeBinary, canary: canary,
				asserted: asserted, resolverAlive: resolverAlive, gate: gate, journal: jnl, source: source,
				saved: saved, sourceHealth: natsw.health, interval: *interval, budget: reconcile.Budget{Max: *budget, Window: *window}, holdAbove: *holdAbove,
			})
			if err != nil {
				return err
			}
			current.Store(a)
			return a.Run(gctx)
		})
		err = g.Wait()
		logger.Info("agent stopped; containers are left running", "err", err)
		if err != nil && ctx.Err() == nil {
			return 1, err
		}
		return 0, nil
	}
}

// agentSetup is what newAgent makes an agent of.
type agentSetup struct {
	logger        *slog.Logger
	reg           prometheus.Registerer
	dir           statedir.Dir
	machine       string
	podman        *podman.Runtime // nil: the in-memory runtime
	runtime       reconcile.Runtime
	inPlace       bool
	nets          agent.Networks
	resolver      agent.Resolver
	exposeTo      migrations.Resolver
	static        []netip.AddrPort
	allow         []netip.Prefix
	nodeLocal     netip.Addr
	loopback      netip.Addr
	outside       string
	outsideWant   netip.Addr
	probeBinary   string
	canary        func(context.Context, string) (netip.Addr, error)
	asserted      func() error
	resolverAlive func() error
	gate          *migrations.Gate
	journal       *journal.Journal
	source        *declsource.Source
	saved         *agent.Saved
	sourceHealth  func() error
	interval      time.Duration
	budget        reconcile.Budget
	holdAbove     int // --hold-above
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
			Resolver: s.exposeTo, NodeLocal: s.nodeLocal, Loopback: s.loopback, Allow: s.allow, Static: s.static, Logger: logger,
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
				Owner: s.machine, Canary: s.canary,
			})
		}
	}
	// The machine's key for the hashes records and changes show for env
	// and label values (made on first use).
	hashKey, err := s.dir.LoadHashKey()
	if err != nil {
		return nil, err
	}
	rec, saveState, err := openReconciler(reconcile.Config{
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
		ResolverAlive: s.resolverAlive, Asserted: s.asserted, SourceHealth: s.sourceHealth,
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
	var l slog.Level
	if err := l.UnmarshalText(bytes.TrimSpace(data)); err != nil {
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
	var l slog.Level
	if err := l.UnmarshalText([]byte(text)); err != nil {
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

// reconcileStateVersion is the version of the reconciler's state file
// this meshhost writes; it reads every version up to it.
//
// History:
//
//	1: the start times of the replacements in the budget's window, and
//	   the adoptions (ID, name, digest and record of each).
//	2: each adoption also carries its reconcile.AdoptionVersion. Those of
//	   a version 1 file have none: on podman before 5.1 (no durable
//	   in-place updates) the reconciler inspects those containers again,
//	   since a meshhost of then recorded limits an update set and a
//	   restart took away.
const reconcileStateVersion = 2

// reconcileState is what the reconciler keeps across restarts, so a restart
// neither resets the replacement budget nor re-inspects adopted containers.
type reconcileState struct {
	Version    int                  `json:"version"` // reconcileStateVersion
	BudgetUsed []time.Time          `json:"budget_used"`
	Adoptions  []reconcile.Adoption `json:"adoptions"`
}

// loadReconcileState returns the reconciler's saved state, and the file's
// bytes (nil when unreadable), so that an unchanged state is not written
// again.
func loadReconcileState(path string, logger *slog.Logger) (reconcileState, []byte) {
	var st reconcileState
	data, err := os.ReadFile(path)
	if err != nil {
		return st, nil
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Version < 1 || st.Version > reconcileStateVersion {
		logger.Warn("ignoring unreadable reconciler state; the budget starts empty", "path", path, "version", st.Version, "err", err)
		return reconcileState{}, nil
	}
	return st, data
}

// openReconciler returns the agent's reconciler for cfg, its budget and
// adoptions restored from the state file path, and save, which writes them
// there after each pass.
//
// The budget is also written the moment a pass charges it, before the
// replacements it charged touch podman (reconcile.Config.BudgetCharged):
// saved only after the pass, the charges of an agent killed mid-pass were
// lost, and an agent crash-looping through replacements began one per
// restart whatever the budget. When that write fails, the pass's
// replacements wait (and the pass fails, naming the file) rather than go
// ahead uncounted: see BudgetCharged for why.
//
// Both writes run within a pass, under the agent's lock.
func openReconciler(cfg reconcile.Config, path string, logger *slog.Logger) (rec *reconcile.Reconciler, save func(), err error) {
	st, onDisk := loadReconcileState(path, logger)
	cfg.BudgetUsed, cfg.Adoptions = st.BudgetUsed, st.Adoptions
	cfg.BudgetCharged = func(used []time.Time) error {
		// rec is set: a pass runs only after New returned.
		var err error
		onDisk, err = writeReconcileState(path, reconcileState{Version: reconcileStateVersion, BudgetUsed: used, Adoptions: rec.Adoptions()}, onDisk)
		return err
	}
	if rec, err = reconcile.New(cfg); err != nil {
		return nil, nil, err
	}
	return rec, func() { onDisk = saveReconcileState(path, rec, onDisk, logger) }, nil
}

// saveReconcileState writes the reconciler's state when it differs from
// what was last written (prev), and returns what is on disk now: a pass that
// replaced nothing writes nothing. A failed write is logged.
func saveReconcileState(path string, rec *reconcile.Reconciler, prev []byte, logger *slog.Logger) []byte {
	data, err := writeReconcileState(path, reconcileState{Version: reconcileStateVersion, BudgetUsed: rec.BudgetUsed(), Adoptions: rec.Adoptions()}, prev)
	if err != nil {
		logger.Error("saving reconciler state", "path", path, "err", err)
	}
	return data
}

// writeReconcileState writes st when it differs from what was last written
// (prev), and returns what is on disk now (prev when the write fails).
func writeReconcileState(path string, st reconcileState, prev []byte) ([]byte, error) {
	data, _ := json.Marshal(st)
	if bytes.Equal(data, prev) {
		return prev, nil
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return prev, err // names path
	}
	return data, nil
}
