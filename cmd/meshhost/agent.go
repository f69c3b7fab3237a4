package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/netflag"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func init() {
	register(command{name: "agent", summary: "run the host agent: resolver, migration gate and reconcile loop", run: runAgent})
}

func runAgent(ctx context.Context, env *environment, args []string) (int, error) {
	fs := newFlagSet(env, "agent")
	declPath := fs.String("declaration", "", "the declaration: a file, or a directory whose last *.json file is the declaration; watched for changes")
	push := fs.String("push", "", "the controller's push endpoint: unix:/path.sock or a loopback ip:port (default unix:STATE/push.sock; \"off\" disables it)")
	httpAddr := fs.String("http", "127.0.0.1:9469", "where /metrics and /healthz are served (\"off\" disables them)")
	machine := fs.String("machine", defaultMachine(), "this machine's name in the mesh: declarations for another machine are refused, and only containers it created are ever removed")
	stateDir := fs.String("state", statedir.Default, "state directory: saved declaration and roster, migration state, journal")
	runtimeKind := fs.String("runtime", "podman", "container runtime: podman, or memory (embedded, for trying the agent out)")
	socket := fs.String("podman", "", "podman API socket (default $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST)")
	interval := fs.Duration("interval", 30*time.Second, "time between periodic passes")
	budget := fs.Int("budget", reconcile.DefaultBudget.Max, "replacements allowed per budget window")
	window := fs.Duration("budget-window", reconcile.DefaultBudget.Window, "the replacement budget's window")
	nodeLocal := fs.String("node-local", migrations.DefaultNodeLocal, "the node-local resolver address (assigned to lo) for routed networks")
	probeBinary := fs.String("probe-binary", "", "the meshprobe binary (default $"+migrations.EnvProbeBinary+", next to meshhost, or on $PATH)")
	proofMaxAge := fs.Duration("proof-max-age", migrations.DefaultMaxProofAge, "how old a passing probe may be and still switch a network to the resolver; older ones (an agent that could not probe since) wait for a new probe")
	probeOutside := fs.String("probe-outside", "", "a name outside the mesh the probe must resolve through the resolver's forwarding, as NAME or NAME=ADDR; required before any network can switch to the resolver")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var upstreams netflag.Upstreams
	var listens netflag.AddrPorts
	var allow netflag.Prefixes
	fs.Var(&upstreams, "upstream", "upstream DNS server `ADDR[,ADDR...]` (ip or ip:port) for names outside the mesh; repeatable (default: /etc/resolv.conf)")
	fs.Var(&listens, "listen", "extra resolver listen `ADDR[,ADDR...]` (ip:port); repeatable, e.g. 127.0.0.1:53 for the host itself")
	fs.Var(&allow, "allow", "extra resolver client `CIDR[,CIDR...]` (or address); repeatable; probed container networks and loopback are always allowed")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return 2, fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: level}))
	dir := statedir.New(*stateDir)
	if err := dir.Create(); err != nil {
		return 1, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The resolver comes first: it serves the saved roster before the
	// controller or the runtime answer anything.
	srv, err := resolver.New(resolver.Config{
		Logger: logger, Registerer: reg, Upstreams: upstreams, Allow: allow,
		StatePath: dir.Roster(),
		Forbidden: resolver.PodmanDNSGuard(),
	})
	if err != nil {
		return 1, err
	}
	defer srv.Close() // last: the resolver answers until the very end
	for _, l := range listens {
		if err := srv.Listen(l); err != nil {
			return 1, fmt.Errorf("--listen %s: %w", l, err)
		}
	}
	if r := srv.Roster(); r != nil {
		logger.Info("serving the saved roster", "generation", r.Generation, "names", len(r.Names))
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
	source := declsource.New(declsource.Config{Machine: *machine, Initial: initial, Reader: specjson.Reader{Busy: srv.Busy}, Logger: logger})
	if _, ok := source.Head(); !ok {
		saved = nil // not taken (another machine's): nothing to go on from
	}

	var rt reconcile.Runtime
	inPlace := true
	var nets agent.Networks
	var exposer *migrations.Exposer
	var newProber func(zone string) (agent.Prober, error)
	switch *runtimeKind {
	case "memory":
		rt = memory.New(memory.Options{})
	case "podman":
		uri := podmanSocket(env, *socket)
		if uri == "" {
			return 2, errors.New("no podman socket: pass --podman unix:///run/podman/podman.sock or set MESHHOST_PODMAN_SOCKET")
		}
		p, updates, err := openPodman(ctx, uri, logger)
		if err != nil {
			return 1, err
		}
		rt, nets, inPlace = p, p, updates
		// Probe containers an agent killed mid-probe left behind, before
		// this one probes anything.
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		if _, err := migrations.SweepProbes(sctx, p, *machine, logger); err != nil {
			logger.Warn("sweeping probe containers left behind", "err", err)
		}
		cancel()
		if !inPlace {
			logger.Info("this podman does not keep in-place resource updates across restarts (before 5.1): resource changes replace the container")
		}
		nl, err := netip.ParseAddr(*nodeLocal)
		if err != nil {
			return 2, fmt.Errorf("--node-local: %w", err)
		}
		outside, outsideWant, err := parseOutside(*probeOutside)
		if err != nil {
			return 2, err
		}
		// The exposer is made here, not with the prober: the networks in
		// resolve mode are served from the first pass even when no prober
		// can be made. The --listen addresses are the operator's: never
		// closed when a network goes.
		exposer, err = migrations.NewExposer(migrations.ExposerConfig{
			Resolver: srv, NodeLocal: nl, Allow: allow, Static: srv.Listeners(), Logger: logger,
		})
		if err != nil {
			return 1, err
		}
		newProber = func(zone string) (agent.Prober, error) {
			if outside == "" {
				return nil, errors.New("no --probe-outside: the probe must prove that names outside the mesh still resolve through the resolver; give a name your upstream answers, e.g. --probe-outside example.org")
			}
			bin := *probeBinary
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
				Outside: outside, OutsideWant: outsideWant, Logger: logger,
				Owner: *machine,
			})
		}
	default:
		return 2, fmt.Errorf("--runtime %q: want podman or memory", *runtimeKind)
	}

	gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: *machine, Logger: logger, Registerer: reg, MaxProofAge: *proofMaxAge})
	if err != nil {
		return 1, err
	}
	jnl, err := journal.Open(dir.Journal(), journal.Options{})
	if err != nil {
		return 1, err
	}
	rec, saveState, err := openReconciler(reconcile.Config{
		Runtime: rt, Owner: *machine, NoInPlaceUpdates: !inPlace, Logger: logger, Registerer: reg,
		Budget: reconcile.Budget{Max: *budget, Window: *window},
	}, dir.Reconciler(), logger)
	if err != nil {
		return 1, err
	}
	acfg := agent.Config{
		Runtime: rt, Reconciler: rec, Resolver: srv, Gate: gate, Source: source,
		Networks: nets, NewProber: newProber, Journal: jnl, State: dir, Saved: saved,
		Interval: *interval, Logger: logger, Registerer: reg,
		AfterPass: func(*agent.Report) { saveState() },
	}
	if exposer != nil { // not a nil *Exposer in the interface
		acfg.Exposer = exposer
	}
	a, err := agent.New(acfg)
	if err != nil {
		return 1, err
	}

	g, gctx := errgroup.WithContext(ctx)
	if *declPath != "" {
		g.Go(func() error { return source.WatchPath(gctx, *declPath) })
	}
	if *push != "off" {
		addr := *push
		if addr == "" {
			addr = "unix:" + dir.PushSocket()
		}
		l, err := declsource.Listen(addr)
		if err != nil {
			return 1, err
		}
		logger.Info("push endpoint", "addr", addr)
		g.Go(func() error { return serveHTTP(gctx, l, source.Handler()) })
	}
	if *httpAddr != "off" {
		l, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return 1, fmt.Errorf("--http: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("/healthz", a.Handler()) // neither waits for a pass in progress
		mux.Handle("/v1/report", a.Handler())
		logger.Info("metrics and health", "addr", l.Addr().String())
		g.Go(func() error { return serveHTTP(gctx, l, mux) })
	}
	g.Go(func() error { return a.Run(gctx) })
	err = g.Wait()
	logger.Info("agent stopped; containers are left running", "err", err)
	if err != nil && ctx.Err() == nil {
		return 1, err
	}
	return 0, nil
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

// reconcileState is what the reconciler keeps across restarts, so a restart
// neither resets the replacement budget nor re-inspects adopted containers.
type reconcileState struct {
	Version    int                  `json:"version"` // 1
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
	if err := json.Unmarshal(data, &st); err != nil || st.Version != 1 {
		logger.Warn("ignoring unreadable reconciler state; the budget starts empty", "path", path, "err", err)
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
		onDisk, err = writeReconcileState(path, reconcileState{Version: 1, BudgetUsed: used, Adoptions: rec.Adoptions()}, onDisk)
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
	data, err := writeReconcileState(path, reconcileState{Version: 1, BudgetUsed: rec.BudgetUsed(), Adoptions: rec.Adoptions()}, prev)
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
