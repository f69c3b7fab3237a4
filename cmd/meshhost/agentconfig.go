package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/natssource"
	"github.com/meshhost/meshhost/internal/plumbing/flagfile"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/netflag"
	"github.com/meshhost/meshhost/internal/resolvercmd"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
)

// agentFlags are `meshhost agent`'s flags, as defined on its flag set.
// check turns them, with the configuration file, into an agentConfig;
// nothing after it reads a flag.
type agentFlags struct {
	fs                                             *flag.FlagSet
	config, declaration, source, push, http        *string
	machine, state, runtime, podman, resolver      *string
	nodeLocal, loopback, probeBinary, probeOutside *string
	logLevel, logLevelFile                         *string
	httpRemote                                     *bool
	interval, window, proofMaxAge                  *time.Duration
	budget, holdAbove                              *int
	nats                                           natsFlags
	pushAuth                                       pushFlags
	log                                            logging.Flags
	upstreams                                      netflag.Upstreams
	listens                                        netflag.AddrPorts
	allow                                          netflag.Prefixes
	cache                                          resolvercmd.CacheFlags
}

// defineAgentFlags defines `meshhost agent`'s flags on fs.
func defineAgentFlags(fs *flag.FlagSet) *agentFlags {
	f := &agentFlags{fs: fs}
	f.config = fs.String("config", "", "a configuration `FILE` (TOML) whose keys are this command's flags, e.g. /etc/meshhost/agent.toml; flags given here win over it; meshhost config check checks it")
	f.declaration = fs.String("declaration", "", "the declaration: a file, or a directory whose last *.json file is the declaration; watched for changes, and read again on SIGHUP")
	f.source = fs.String("source", "", "a NATS JetStream roster source, nats://HOST:4222 (see --nats-*): the roster and this machine's declaration are watched in its buckets")
	f.nats = addNATSFlags(fs)
	f.nats.addPatienceFlag(fs)
	f.push = fs.String("push", "", "the controller's push endpoint: unix:/path.sock or a loopback ip:port (default unix:STATE/push.sock; \"off\" disables it)")
	f.pushAuth.register(fs)
	f.http = fs.String("http", "127.0.0.1:9469", "where /metrics, /livez, /readyz (and /healthz, its old name) are served, on a loopback address unless --http-remote (\"off\" disables them)")
	f.httpRemote = fs.Bool("http-remote", false, "let --http listen on an address other machines can reach (it serves metrics and health, never a declaration's values)")
	f.machine = fs.String("machine", defaultMachine(), "this machine's name in the mesh: declarations for another machine are refused, and only containers it created are ever removed")
	f.state = fs.String("state", statedir.Default, "state directory: saved declaration and roster, migration state, journal")
	f.runtime = fs.String("runtime", "podman", "container runtime: podman, or memory (embedded, for trying the agent out)")
	f.podman = fs.String("podman", "", "podman API socket (default $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST); while it does not answer the agent waits for it, retrying")
	f.resolver = fs.String("resolver", "embedded", "where the resolver runs: \"embedded\" (in this process: containers lose DNS whenever the agent stops) or unix:PATH, the control socket of meshhost-resolver, which outlives the agent (packaging/systemd runs it so)")
	f.interval = fs.Duration("interval", 30*time.Second, "time between periodic passes (a failed pass is retried sooner: 1s, doubling up to this)")
	f.budget = fs.Int("budget", reconcile.DefaultBudget.Max, "replacements and removals allowed per budget window")
	f.holdAbove = fs.Int("hold-above", agent.DefaultHoldAbove, "hold a declaration whose plan would replace and remove more than `N` containers (together) until meshhost approve GEN (0 never holds)")
	f.window = fs.Duration("budget-window", reconcile.DefaultBudget.Window, "the replacement budget's window")
	f.nodeLocal = fs.String("node-local", migrations.DefaultNodeLocal, "the node-local resolver address (assigned to lo) for routed networks")
	f.loopback = fs.String("loopback", migrations.DefaultLoopback, "the loopback address (127.0.0.0/8) where the resolver serves aardvark-dns's forwarded queries, for DNS-enabled networks (podman 4.4 and later), and containers on the host's network")
	f.probeBinary = fs.String("probe-binary", "", "the meshprobe binary (default $"+migrations.EnvProbeBinary+", next to meshhost, or on $PATH)")
	f.proofMaxAge = fs.Duration("proof-max-age", migrations.DefaultMaxProofAge, "how old a passing probe may be and still switch a network to the resolver; older ones (an agent that could not probe since) wait for a new probe")
	f.probeOutside = fs.String("probe-outside", "", "a name outside the mesh the probe must resolve through the resolver's forwarding, as NAME or NAME=ADDR; required before any network can switch to the resolver")
	f.logLevel = fs.String("log-level", "info", "debug, info, warn (or warning) or error")
	f.logLevelFile = fs.String("log-level-file", "", "a `FILE` holding the log level (debug, info, warn or error), read at start and on SIGHUP; it overrides --log-level")
	f.log.RegisterFormat(fs)
	fs.Var(&f.upstreams, "upstream", "upstream DNS server `ADDR[,ADDR...]` (ip or ip:port) for names outside the mesh; repeatable (default: /etc/resolv.conf); the embedded resolver's only")
	fs.Var(&f.listens, "listen", "extra resolver listen `ADDR[,ADDR...]` (ip:port); repeatable, e.g. 127.0.0.1:53 for the host itself")
	fs.Var(&f.allow, "allow", "extra resolver client `CIDR[,CIDR...]` (or address); repeatable; probed container networks and loopback are always allowed")
	f.cache.Register(fs)
	return f
}

// agentConfig is the agent's configuration, its flags and configuration
// file read and checked by agentFlags.check: what every later phase of
// the agent's setup takes.
type agentConfig struct {
	ConfigPath   string   // --config; "" none
	Keys         []string // the file's keys applied, sorted
	Declaration  string
	NATSURL      string
	NATS         natsFlags
	Push         string // "" the state directory's socket; "off"
	PushAccess   declsource.Access
	HTTP         string // "off": none
	Machine      string
	State        statedir.Dir
	Runtime      string // podman or memory
	PodmanURI    string // with the podman runtime
	ResolverAt   string // as given
	External     string // the resolver service's control socket; "": embedded
	Interval     time.Duration
	Budget       reconcile.Budget
	HoldAbove    int
	NodeLocal    netip.Addr
	Loopback     netip.Addr
	ProbeBinary  string
	Outside      string
	OutsideWant  netip.Addr
	Level        slog.Level
	LevelFile    string
	LogFormat    string
	Upstreams    []netip.AddrPort
	Listens      []netip.AddrPort
	Allow        []netip.Prefix
	Cache        resolvercmd.CacheFlags
	IgnoredCache []string // the cache flags set with a resolver service
	ProofMaxAge  time.Duration

	given map[string]bool // the command line's flags
	lines map[string]int  // the file's keys' lines
	fs    *flag.FlagSet
}

// configError is every fault of a configuration (flagfile.Faults.Err):
// the agent exits exitConfig for them, and its unit does not restart it.
type configError = flagfile.FaultsError

// check reads the configuration file (--config), applies it under the
// flags the command line gave, and checks every value: the agent's one
// validation, which `meshhost config check` runs too. Its error (a
// *configError) holds every fault at once.
func (f *agentFlags) check(ctx context.Context, env *environment) (*agentConfig, error) {
	c := &agentConfig{ConfigPath: *f.config, given: givenFlags(ctx), fs: f.fs}
	c.lines = map[string]int{}
	fl := &flagfile.Faults{Path: *f.config, Lines: c.lines}
	if *f.config != "" {
		data, err := os.ReadFile(*f.config)
		if err != nil {
			return nil, &configError{Errs: []error{fmt.Errorf("reading the configuration: %w", err)}}
		}
		fl.Read(flagfile.Read(f.fs, *f.config, data, c.given, "config"))
		for k := range fl.Lines {
			c.Keys = append(c.Keys, k)
		}
		slices.Sort(c.Keys)
	}
	f.checkRuntime(c, fl, env)
	f.checkLoop(c, fl)
	f.checkResolver(c, fl)
	f.checkEndpoints(c, fl)
	f.checkMigration(c, fl)
	f.checkLogs(c, fl)
	c.Declaration, c.Machine, c.State = *f.declaration, *f.machine, statedir.New(*f.state)
	if c.Machine == "" {
		fl.Add("machine", errors.New("is empty: give this machine's name in the mesh"))
	}
	c.NATSURL, c.NATS = *f.source, f.nats
	if c.NATSURL != "" && !strings.HasPrefix(c.NATSURL, "nats://") && !strings.HasPrefix(c.NATSURL, "tls://") {
		fl.Add("source", fmt.Errorf("%q: want nats://HOST:PORT or tls://HOST:PORT (the file and push sources are --declaration and --push)", natssource.RedactURL(c.NATSURL)))
	}
	if *f.nats.patience < 0 {
		fl.Add("nats-patience", negative(*f.nats.patience))
	}
	if err := fl.Err(); err != nil {
		return c, err // the file's faults in its order, then the command line's
	}
	return c, nil
}

// negative is the fault of a negative duration.
func negative(d time.Duration) error {
	return fmt.Errorf("%q is negative: want a duration of 0 or more, e.g. \"30s\"", d)
}

// checkRuntime checks the runtime and its socket.
func (f *agentFlags) checkRuntime(c *agentConfig, fl *flagfile.Faults, env *environment) {
	c.Runtime = *f.runtime
	switch c.Runtime {
	case "podman":
		if c.PodmanURI = podmanSocket(env, *f.podman); c.PodmanURI == "" {
			fl.Add("podman", errors.New("no podman socket: give podman = \"unix:///run/podman/podman.sock\" (--podman) or set MESHHOST_PODMAN_SOCKET"))
		}
	case "memory":
	default:
		fl.Add("runtime", fmt.Errorf("%q: want podman or memory", c.Runtime))
	}
}

// checkLoop checks the pass loop's timing, budget and hold.
func (f *agentFlags) checkLoop(c *agentConfig, fl *flagfile.Faults) {
	c.Interval, c.Budget, c.HoldAbove = *f.interval, reconcile.Budget{Max: *f.budget, Window: *f.window}, *f.holdAbove
	if c.Interval < 0 {
		fl.Add("interval", negative(c.Interval))
	}
	if c.Budget.Max < 0 {
		fl.Add("budget", fmt.Errorf("%d: want 0 or more replacements and removals per window", c.Budget.Max))
	}
	if c.Budget.Window < 0 {
		fl.Add("budget-window", negative(c.Budget.Window))
	}
	if c.HoldAbove < 0 {
		fl.Add("hold-above", fmt.Errorf("%d: want 0 (never hold) or more", c.HoldAbove))
	}
}

// checkResolver checks where the resolver runs and the embedded one's
// settings.
func (f *agentFlags) checkResolver(c *agentConfig, fl *flagfile.Faults) {
	c.ResolverAt = *f.resolver
	c.Upstreams, c.Listens, c.Allow, c.Cache = f.upstreams, f.listens, f.allow, f.cache
	external, err := agent.ParseResolverAt(c.ResolverAt)
	if err != nil {
		fl.Add("resolver", errors.New(strings.TrimPrefix(err.Error(), "--resolver ")))
	}
	c.External = external
	if external != "" && len(c.Upstreams) > 0 {
		fl.Add("upstream", errors.New("is the embedded resolver's: give meshhost-resolver its upstreams (its --upstream, or its --resolv-conf)"))
	}
	if c.Cache.Size < 0 {
		fl.Add("cache-size", fmt.Errorf("%d: want 0 (no cache) or more", c.Cache.Size))
	}
	for key, d := range map[string]time.Duration{"cache-max-ttl": c.Cache.MaxTTL, "cache-max-negative-ttl": c.Cache.MaxNeg} {
		if d < 0 {
			fl.Add(key, negative(d))
		}
	}
	// The embedded resolver's cache flags change nothing with a resolver
	// service (it keeps its own cache): said at the start, not refused, so
	// that a configuration that always set them does not stop the agent
	// after an upgrade.
	if external == "" {
		return
	}
	set := maps.Clone(c.given) // the command line's
	if set == nil {
		set = map[string]bool{}
	}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true }) // the file's
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if set[name] && strings.HasPrefix(name, "cache-") {
			c.IgnoredCache = append(c.IgnoredCache, "--"+name)
		}
	}
}

// checkEndpoints checks the push and the metrics and health endpoints.
func (f *agentFlags) checkEndpoints(c *agentConfig, fl *flagfile.Faults) {
	c.Push, c.HTTP = *f.push, *f.http
	if c.Push != "" && c.Push != "off" {
		if err := declsource.CheckAddr(c.Push); err != nil {
			fl.Add("push", err)
			c.Push = "off" // nothing more to check of it
		}
	}
	access, key, err := f.pushAuth.check(c.Push)
	if err != nil {
		fl.Add(key, err)
	}
	c.PushAccess = access
	if err := checkHTTP(c.HTTP, *f.httpRemote); err != nil {
		fl.Add("http", err)
	}
}

// checkMigration checks the migration's addresses and probe.
func (f *agentFlags) checkMigration(c *agentConfig, fl *flagfile.Faults) {
	var err error
	if c.NodeLocal, err = netip.ParseAddr(*f.nodeLocal); err != nil {
		fl.Add("node-local", fmt.Errorf("%q is not an IP address, e.g. %s", *f.nodeLocal, migrations.DefaultNodeLocal))
	}
	if c.Loopback, err = netip.ParseAddr(*f.loopback); err != nil {
		fl.Add("loopback", fmt.Errorf("%q is not an IP address, e.g. %s", *f.loopback, migrations.DefaultLoopback))
	}
	if c.Outside, c.OutsideWant, err = parseOutside(*f.probeOutside); err != nil {
		fl.Add("probe-outside", err)
	}
	c.ProbeBinary, c.ProofMaxAge = *f.probeBinary, *f.proofMaxAge
	if c.ProofMaxAge < 0 {
		fl.Add("proof-max-age", negative(c.ProofMaxAge))
	}
}

// checkLogs checks the log level (its file's too) and format.
func (f *agentFlags) checkLogs(c *agentConfig, fl *flagfile.Faults) {
	var err error
	if c.Level, err = logging.ParseLevel(*f.logLevel); err != nil {
		fl.Add("log-level", err)
	}
	c.LevelFile, c.LogFormat = *f.logLevelFile, f.log.Format
	if c.LevelFile != "" {
		l, err := readLogLevel(c.LevelFile)
		if err != nil {
			fl.Add("log-level-file", err)
		}
		c.Level = l
	}
	if c.LogFormat != logging.Text && c.LogFormat != logging.JSON {
		fl.Add("log-format", fmt.Errorf("%q: want text or json", c.LogFormat))
	}
}

// checkHTTP refuses an --http address that is not HOST:PORT, and one other
// machines could reach unless remote is set (--http-remote): it serves
// metrics and health, which name containers and networks, though never a
// declaration's values.
func checkHTTP(addr string, remote bool) error {
	if addr == "off" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want ip:port, e.g. 127.0.0.1:%s (or \"off\")", addr, strings.TrimPrefix(addr, ":"))
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		return fmt.Errorf("%q: the port %q is not a number from 0 to 65535", addr, port)
	}
	return netflag.Loopback{Flag: "--http", RemoteFlag: "--http-remote", Serves: "metrics and health", Example: "127.0.0.1:9469"}.Check(addr, remote)
}

// levelSource returns how SIGHUP reads the log level again, as at start:
// --log-level-file, else --log-level on the command line (which stays),
// else the configuration file's log-level (its default when the key is
// gone); nil: nothing to read.
func (c *agentConfig) levelSource() func() (slog.Level, error) {
	switch {
	case c.LevelFile != "":
		return func() (slog.Level, error) { return readLogLevel(c.LevelFile) }
	case c.ConfigPath != "" && !c.given["log-level"]:
		return func() (slog.Level, error) { return configLogLevel(c.fs, c.ConfigPath) }
	}
	return nil
}
