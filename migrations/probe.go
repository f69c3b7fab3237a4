package migrations

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// Runtime is what a Runner needs of the container runtime;
// reconcile/podman's Runtime has it.
type Runtime interface {
	// Networks lists the runtime's networks.
	Networks(ctx context.Context) ([]Network, error)
	// RuntimeVersion names the runtime and its version, for the report
	// ("podman 4.3.1").
	RuntimeVersion(ctx context.Context) (string, error)
	// RunOnce creates a container with exactly the settings r, runs it to
	// completion and returns its exit code and output; the container is
	// removed on every path.
	RunOnce(ctx context.Context, r spec.Rendered) (exitCode int, output string, err error)
	// ProbeCleaner lists and removes probe containers, so that a Runner
	// sweeps those a killed agent left behind.
	ProbeCleaner
}

// Resolver is what an Exposer needs of the resolver (resolver.Server has
// it): to be made reachable where a strategy says, and no longer where no
// network needs it. The canary a probe asks it is resolver.CanaryName, with
// resolver.CanaryAddress.
type Resolver interface {
	Listen(addr netip.AddrPort) error
	Unlisten(addr netip.AddrPort) error
	SetAllow(clients []netip.Prefix)
	SetLocalForward(client netip.Prefix, zone string, server netip.AddrPort)
}

// DefaultNodeLocal is the node-local address StrategyNodeLocal uses unless
// told otherwise. It must be assigned to the host's lo:
//
//	ip addr add 169.254.53.53/32 dev lo
const DefaultNodeLocal = "169.254.53.53"

// DefaultLoopback is the address StrategyAardvark uses unless told
// otherwise: in 127.0.0.0/8, which needs no configuration, and away from
// the loopback addresses local resolvers take (127.0.0.1, systemd-resolved's
// 127.0.0.53 and 127.0.0.54).
const DefaultLoopback = "127.53.53.53"

// LabelProbe marks probe containers, with the probe's nonce as its value.
// The reconciler never manages them (they lack its managed label).
const LabelProbe = spec.LabelPrefix + "probe"

// RunnerConfig is what a Runner needs. Runtime, Resolver (or Exposer),
// Image, Zone and Outside are required.
type RunnerConfig struct {
	Runtime Runtime
	// Exposer, when set, is how the Runner makes the resolver reachable,
	// shared with its other users (the agent): Resolver, NodeLocal,
	// Loopback and Allow are then the Exposer's, and ignored here. Nil: the Runner
	// makes its own from them.
	Exposer  *Exposer
	Resolver Resolver
	// Image is the probe image (see ProbeImage).
	Image string
	// Zone is a zone of the roster the resolver serves; the canary is
	// asked under it.
	Zone string
	// Outside is a name outside the mesh the probe resolves through the
	// resolver's forwarding; OutsideWant, when valid, is an address the
	// answer must contain (any answer passes otherwise).
	Outside     string
	OutsideWant netip.Addr
	// NodeLocal is StrategyNodeLocal's address. Default DefaultNodeLocal.
	// The strategy is tried only while the address is assigned to this
	// host, so probe traffic never leaves the machine.
	NodeLocal netip.Addr
	// Loopback is StrategyAardvark's and StrategyLoopback's address.
	// Default DefaultLoopback.
	Loopback netip.Addr
	// Allow is the resolver's own client allow list; the Runner sets the
	// resolver's list to it plus the subnets of the networks it serves.
	// Once a Runner exists, change the list through its Exposer's
	// SetAllow only.
	Allow []netip.Prefix
	// ProbeUnroutable also probes macvlan, ipvlan and unknown drivers. Off
	// by default: from those the node-local address is reached, if at all,
	// over the parent interface's link, off this machine. They are
	// reported as failed, not probed.
	ProbeUnroutable bool
	// Timeout bounds one probe container, create to removal. Default 30s.
	Timeout time.Duration
	// Concurrency bounds the probe containers running at once. Default 4.
	Concurrency int
	// Owner is put on every probe container as LabelProbeOwner (the agent
	// gives its machine's name). Before each probe round the Runner
	// removes the probe containers of Owner that none of its rounds runs:
	// left behind by an agent killed mid-probe (see SweepProbes). Empty:
	// probe containers carry no owner, and only unowned ones older than
	// UnownedProbeAge are swept.
	Owner  string
	Logger *slog.Logger
	// Registerer receives the Runner's metrics
	// (meshhost_migrations_probe_panics_total); nil registers none. Runners
	// made one after another on one Registerer share them.
	Registerer prometheus.Registerer
	// Now is the clock of Result.At. Nil: time.Now.
	Now func() time.Time
	// Canary returns the address the resolver answers for the canary of
	// nonce. Nil: resolver.CanaryAddress, right for a resolver in this
	// process; a resolver in a process of its own is asked (its canary
	// secret is its own), e.g. with resolver/control's Client.Canary.
	Canary func(ctx context.Context, nonce string) (netip.Addr, error)
}

// Runner probes networks.
type Runner struct {
	cfg    RunnerConfig
	log    *slog.Logger
	exp    *Exposer
	panics prometheus.Counter

	// mu guards the fields below.
	mu      sync.Mutex
	running map[string]bool // names of the probe containers of rounds in flight
}

// NewRunner returns a Runner for cfg.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	switch {
	case cfg.Runtime == nil:
		return nil, errors.New("migrations: RunnerConfig.Runtime is required")
	case cfg.Resolver == nil && cfg.Exposer == nil:
		return nil, errors.New("migrations: RunnerConfig.Resolver is required")
	case cfg.Image == "":
		return nil, errors.New("migrations: RunnerConfig.Image is required (see ProbeImage)")
	case spec.CheckName(spec.CanonicalName(cfg.Zone)) != nil:
		return nil, fmt.Errorf("migrations: RunnerConfig.Zone %q is not a zone name", cfg.Zone)
	case cfg.Outside == "":
		return nil, errors.New("migrations: RunnerConfig.Outside is required: a name outside the mesh the resolver forwards")
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, 30*time.Second)
	cfg.Concurrency = cmp.Or(max(cfg.Concurrency, 0), 4)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	exp := cfg.Exposer
	if exp == nil {
		var err error
		exp, err = NewExposer(ExposerConfig{Resolver: cfg.Resolver, NodeLocal: cfg.NodeLocal, Loopback: cfg.Loopback, Allow: cfg.Allow, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
	}
	panics, err := registerCounter(cfg.Registerer, prometheus.CounterOpts{
		Name: "meshhost_migrations_probe_panics_total",
		Help: "Network probes that panicked (a bug); recovered, each a failed probe of its network.",
	})
	if err != nil {
		return nil, fmt.Errorf("registering probe metrics: %w", err)
	}
	return &Runner{cfg: cfg, log: cfg.Logger.With("component", "migrations"), exp: exp, panics: panics, running: map[string]bool{}}, nil
}

// Result is one network's probe.
type Result struct {
	Network string    `json:"network"`
	Driver  string    `json:"driver"`
	Kind    Kind      `json:"kind"`
	Pass    bool      `json:"pass"`
	At      time.Time `json:"at"`
	// Strategy is the strategy that passed, or the last one tried.
	Strategy Strategy `json:"strategy,omitempty"`
	// Reason says what passed, or why the network failed.
	Reason string `json:"reason"`
	// Latency is the canary lookup inside the probe container; Duration
	// the whole probe, container creation to removal.
	Latency  time.Duration `json:"latency"`
	Duration time.Duration `json:"duration"`
	Runtime  string        `json:"runtime"`
	// DNS is the resolve-mode configuration proven on the network.
	DNS spec.DNSConfig `json:"dns"`
	// Attempts lists every strategy tried, in order.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// Attempt is one strategy tried on a network.
type Attempt struct {
	Strategy Strategy      `json:"strategy"`
	Pass     bool          `json:"pass"`
	Reason   string        `json:"reason"`
	Latency  time.Duration `json:"latency"`
	Duration time.Duration `json:"duration"`
}

// Probe probes the networks nets (the runtime's, as the caller listed
// them), with prefer naming, per network, the strategy to try first (the
// one its containers already use; see Gate.Strategies), so that a network
// keeps its configuration. It tries each network's candidate
// strategies in order until one passes, and returns one Result per network
// in the order of nets. The resolver stays reachable through every
// strategy that passed (and every one it was already reachable through).
//
// Before the round it sweeps the probe containers left behind (see
// RunnerConfig.Owner); a failed sweep is logged, and the round goes on.
func (r *Runner) Probe(ctx context.Context, nets []Network, prefer map[string]Strategy) []Result {
	if len(nets) > 0 {
		r.Sweep(ctx)
	}
	version, verr := r.cfg.Runtime.RuntimeVersion(ctx)
	if verr != nil {
		version = "unknown (" + verr.Error() + ")"
	}
	results := make([]Result, len(nets))
	var g errgroup.Group
	g.SetLimit(r.cfg.Concurrency)
	for i, n := range nets {
		g.Go(func() error {
			results[i] = r.probeSafely(ctx, n, prefer[n.Name], version)
			return nil
		})
	}
	g.Wait()
	return results
}

// probeSafely is probeNetwork, turning a panic into a failed probe of n,
// logged with the stack and counted (meshhost_migrations_probe_panics_total).
// It runs on a goroutine of its own, which no caller's recover reaches:
// unrecovered, a panic there (a bug in a runtime adapter, say) would end
// the process, the agent and its resolver with it.
func (r *Runner) probeSafely(ctx context.Context, n Network, prefer Strategy, version string) (res Result) {
	defer func() {
		if v := recover(); v != nil {
			r.panics.Inc()
			r.log.ErrorContext(ctx, "a network's probe panicked; it counts as failed", "network", n.Name, "panic", v, "stack", string(debug.Stack()))
			res = Result{Network: n.Name, Driver: n.Driver, Kind: KindOf(n), Runtime: version, At: r.cfg.Now(),
				Reason: fmt.Sprintf("probe panicked: %v", v)}
		}
	}()
	return r.probeNetwork(ctx, n, prefer, version)
}

func (r *Runner) probeNetwork(ctx context.Context, n Network, prefer Strategy, version string) Result {
	kind := KindOf(n)
	res := Result{Network: n.Name, Driver: n.Driver, Kind: kind, Runtime: version, At: r.cfg.Now()}
	cands := candidates(kind)
	if prefer != "" && slices.Contains(cands, prefer) {
		cands = append([]Strategy{prefer}, slices.DeleteFunc(slices.Clone(cands), func(s Strategy) bool { return s == prefer })...)
	}
	switch {
	case len(cands) == 0:
		res.Reason = noStrategy(n, kind)
		return res
	case (kind == KindMacvlan || kind == KindIPvlan || kind == KindOther) && !r.cfg.ProbeUnroutable:
		res.Reason = fmt.Sprintf("not probed: %s network; containers on it usually cannot reach this host, and probe traffic would leave the machine over the parent link (set ProbeUnroutable to probe it)", n.Driver)
		return res
	}
	var reasons []string
	for _, s := range cands {
		a, dns := r.attempt(ctx, n, s)
		res.Attempts = append(res.Attempts, a)
		res.Strategy, res.Latency, res.Duration = s, a.Latency, a.Duration
		if a.Pass {
			res.Pass, res.Reason, res.DNS = true, a.Reason, dns
			r.log.InfoContext(ctx, "probe passed", "network", n.Name, "kind", kind, "strategy", s, "duration_seconds", a.Latency.Seconds())
			return res
		}
		reasons = append(reasons, string(s)+": "+a.Reason)
		if ctx.Err() != nil {
			break
		}
	}
	res.Reason = strings.Join(reasons, "; ")
	r.log.WarnContext(ctx, "probe failed", "network", n.Name, "kind", kind, "reason", res.Reason)
	return res
}

func noStrategy(n Network, k Kind) string {
	if k == KindInternalDNS {
		return "no strategy can work: an internal network has no route to this host's other addresses, and aardvark-dns holds port 53 on its gateway (recreate it with --disable-dns to use the gateway)"
	}
	return fmt.Sprintf("no strategy for %s network %s", n.Driver, n.Name)
}

// attempt exposes the resolver through s and runs one probe container. A
// listener it opened stays open even when the probe fails: it harms
// nothing, and unbinding could take it from a network that passed.
func (r *Runner) attempt(ctx context.Context, n Network, s Strategy) (Attempt, spec.DNSConfig) {
	a := Attempt{Strategy: s}
	if s == StrategyNone {
		a.Pass, a.Reason = true, "nothing to resolve on a network without connectivity"
		return a, spec.DNSConfig{}
	}
	e, err := r.exp.endpoint(n, s)
	if err == nil {
		err = r.exp.expose(n, e)
	}
	if err != nil {
		a.Reason = err.Error()
		return a, spec.DNSConfig{}
	}
	start := time.Now()
	out, err := r.run(ctx, n, e.dns)
	a.Duration = time.Since(start)
	if err != nil {
		a.Reason = err.Error()
		return a, spec.DNSConfig{}
	}
	a.Latency = out.canaryLatency()
	if !out.Pass {
		a.Reason = out.why()
		if d := diagnose(s, e.dns, out); d != "" {
			a.Reason += " (" + d + ")"
		}
		return a, spec.DNSConfig{}
	}
	a.Pass = true
	var checked []string
	for _, c := range out.Checks {
		checked = append(checked, c.Check)
	}
	a.Reason = fmt.Sprintf("resolved %s through %s", strings.Join(checked, ", "), strings.Join(addrStrings(e.dns.Servers), ","))
	return a, e.dns
}

// Sweep removes the probe containers left behind that are this Runner's
// to remove (RunnerConfig.Owner's, and unowned ones older than
// UnownedProbeAge or twice the probe timeout plus a minute, whichever is
// longer), sparing those of its rounds in flight, and returns their names.
// Probe calls it before each round.
func (r *Runner) Sweep(ctx context.Context) []string {
	spare := func(name string) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.running[name]
	}
	age := max(UnownedProbeAge, 2*r.cfg.Timeout+time.Minute)
	removed, err := sweepProbes(ctx, r.cfg.Runtime, r.cfg.Owner, age, spare, time.Now(), r.log) // podman's clock, not Result.At's
	if err != nil {
		r.log.WarnContext(ctx, "sweeping probe containers left behind", "err", err)
	}
	return removed
}

// probeOutput is meshprobe's JSON line.
type probeOutput struct {
	Pass   bool `json:"pass"`
	Checks []struct {
		Check     string   `json:"check"`
		Name      string   `json:"name"`
		Want      string   `json:"want"`
		Got       []string `json:"got"`
		OK        bool     `json:"ok"`
		Error     string   `json:"error"`
		LatencyMS float64  `json:"latency_ms"`
	} `json:"checks"`
	ResolvConf string   `json:"resolv_conf"`
	Addrs      []string `json:"addrs"` // the probe container's own addresses
}

// diagnose says, from what the probe container saw, why a strategy s
// configured as dns cannot work there, when the runtime did something the
// strategy cannot live with; "" when nothing explains the failure.
func diagnose(s Strategy, dns spec.DNSConfig, out probeOutput) string {
	var servers []netip.Addr
	for _, line := range strings.Split(out.ResolvConf, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				servers = append(servers, a.Unmap())
			}
		}
	}
	var why []string
	if s == StrategyAardvark && slices.ContainsFunc(servers, func(a netip.Addr) bool { return slices.Contains(dns.Servers, a) }) {
		why = append(why, fmt.Sprintf("the runtime wrote the DNS server %s into the container's resolv.conf instead of keeping aardvark-dns as its nameserver, as podman before 4.4 does: the container asks its own loopback", strings.Join(addrStrings(dns.Servers), ",")))
	}
	v4, v6 := false, false
	for _, s := range out.Addrs {
		if a, err := netip.ParseAddr(s); err == nil {
			v4, v6 = v4 || a.Unmap().Is4(), v6 || a.Is6() && !a.Is4In6()
		}
	}
	for _, a := range servers {
		if !a.IsLoopback() && (a.Is4() && !v4 || a.Is6() && !v6) {
			why = append(why, fmt.Sprintf("the container has no %s address to reach its nameserver %s", family(a), a))
		}
	}
	return strings.Join(why, "; ")
}

func (o probeOutput) canaryLatency() time.Duration {
	for _, c := range o.Checks {
		if c.Check == "canary" {
			return time.Duration(c.LatencyMS * float64(time.Millisecond))
		}
	}
	return 0
}

func (o probeOutput) why() string {
	var fails []string
	for _, c := range o.Checks {
		if !c.OK {
			fails = append(fails, fmt.Sprintf("%s %s: %s", c.Check, c.Name, c.Error))
		}
	}
	if len(fails) == 0 {
		return "probe failed without a failed check"
	}
	return strings.Join(fails, "; ")
}

// run runs one probe container on n with resolve-mode settings dns.
func (r *Runner) run(ctx context.Context, n Network, dns spec.DNSConfig) (probeOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	nonce := newNonce()
	name := "meshhost-probe-" + nonce
	outsideWant := "any"
	if r.cfg.OutsideWant.IsValid() {
		outsideWant = r.cfg.OutsideWant.String()
	}
	canary := resolver.CanaryAddress(nonce)
	if r.cfg.Canary != nil {
		var err error
		if canary, err = r.cfg.Canary(ctx, nonce); err != nil {
			return probeOutput{}, fmt.Errorf("asking the resolver for the canary's address: %w", err)
		}
	}
	args := []string{
		"-canary", resolver.CanaryName(nonce, r.cfg.Zone) + ".",
		"-canary-want", canary.String(),
		"-outside", strings.TrimSuffix(r.cfg.Outside, ".") + ".",
		"-outside-want", outsideWant,
		"-timeout", "4s",
	}
	if n.DNSEnabled {
		// The probe's own container name, as a peer would ask for it:
		// aardvark-dns must still answer it.
		args = append(args, "-peer", name, "-peer-want", "self")
	}
	labels := map[string]string{LabelProbe: nonce}
	if r.cfg.Owner != "" {
		labels[LabelProbeOwner] = r.cfg.Owner
	}
	c := spec.Container{
		Name:       name,
		Image:      r.cfg.Image,
		Entrypoint: []string{ProbeBinaryPath},
		Command:    args,
		Labels:     labels,
		Networks:   []spec.NetworkAttachment{{Name: n.Name}},
		CapDrop:    []string{"ALL"},
	}
	rendered, err := spec.Render(c, nil, spec.Mode{Names: spec.Resolve, DNS: dns})
	if err != nil {
		return probeOutput{}, fmt.Errorf("rendering the probe container: %w", err)
	}
	code, output, err := r.runOnce(ctx, rendered)
	if err != nil {
		return probeOutput{}, fmt.Errorf("running the probe container: %w", err)
	}
	var out probeOutput
	line := lastJSONLine(output)
	if line == nil {
		return probeOutput{}, fmt.Errorf("the probe exited %d without a result: %q", code, truncate(output, 300))
	}
	if err := json.Unmarshal(line, &out); err != nil {
		return probeOutput{}, fmt.Errorf("reading the probe's result %q: %w", truncate(string(line), 300), err)
	}
	if code != 0 && out.Pass {
		return probeOutput{}, fmt.Errorf("the probe exited %d but says it passed", code)
	}
	return out, nil
}

// runOnce runs the probe container rendered, sparing it from sweeps while
// it runs, and only then (a panic included: it would be spared for good).
func (r *Runner) runOnce(ctx context.Context, rendered spec.Rendered) (int, string, error) {
	r.mu.Lock()
	r.running[rendered.Name] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.running, rendered.Name)
		r.mu.Unlock()
	}()
	return r.cfg.Runtime.RunOnce(ctx, rendered)
}

func lastJSONLine(output string) []byte {
	lines := bytes.Split([]byte(output), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && l[0] == '{' {
			return l
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
