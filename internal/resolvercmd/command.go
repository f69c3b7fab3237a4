package resolvercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/flagfile"
	"github.com/meshhost/meshhost/internal/plumbing/logging"
	"github.com/meshhost/meshhost/internal/plumbing/netflag"
)

// Exit codes of the command, meshhost's (cmd/meshhost/man.go's table).
const (
	ExitUsage  = 64 // a flag or an argument the command does not take (sysexits' EX_USAGE)
	ExitConfig = 78 // the configuration (resolver.toml or a flag's value) is refused (EX_CONFIG); the unit does not restart for it
)

// DefaultConfig is where the package puts the resolver service's
// configuration, which its unit names with --config.
const DefaultConfig = "/etc/meshhost/resolver.toml"

// Deprecated maps each deprecated flag to the one that replaced it: both
// still work, with a warning.
var Deprecated = map[string]string{
	"state-dir":      "state",
	"metrics":        "http",
	"metrics-remote": "http-remote",
}

// resolverFlags are the flags of the command, and what check made of them.
type resolverFlags struct {
	config     string
	roster     string
	listen     netflag.AddrPorts
	upstreams  netflag.Upstreams
	allow      netflag.Prefixes
	resolvConf string
	ttl, neg   time.Duration
	timeout    time.Duration
	cache      CacheFlags
	http       string
	httpRemote bool
	log        logging.Flags

	// As given: --state (a directory; a file, deprecated), --state-dir
	// (deprecated), --metrics and --metrics-remote (deprecated).
	stateArg, stateDirArg string
	metricsArg            string
	metricsRemoteArg      bool

	// What check made of --state and --state-dir: the state directory
	// ("": none) and the saved roster's file in it (or the file given).
	stateDir    string
	rosterState string

	// The service's: see service.go.
	control     string
	controlMode os.FileMode
	controlUIDs []uint32
	handover    string
}

// Command is the resolver's command line: `meshhost resolver` and
// `meshhost-resolver`, whose callers parse its flags (with meshhost's
// command library) and then call Main.
type Command struct {
	Prog string
	fs   *flag.FlagSet
	f    *resolverFlags
}

// New defines the command's flags on fs.
func New(prog string, fs *flag.FlagSet) *Command {
	f := &resolverFlags{}
	fs.StringVar(&f.config, "config", "", "a configuration `FILE` (TOML) whose keys are this command's flags, e.g. "+DefaultConfig+"; flags given here win over it; config check checks it")
	fs.StringVar(&f.roster, "roster", "", "roster `FILE` (JSON) to serve; reloaded on SIGHUP and when it changes")
	fs.Var(&f.listen, "listen", "`ADDR[,ADDR...]` (ip:port) to serve over UDP and TCP; repeatable")
	fs.Var(&f.upstreams, "upstream", "upstream `ADDR[,ADDR...]` (ip or ip:port) for names outside the roster; repeatable (default: the nameservers of --resolv-conf)")
	fs.Var(&f.allow, "allow", "client `CIDR[,CIDR...]` (or address) to answer besides loopback; repeatable (others get REFUSED)")
	fs.StringVar(&f.stateArg, "state", "", "state `DIR`: the last good roster (roster.json) and the exposure put on the control socket (exposure.json), served from the resolver's start (a FILE, deprecated: the saved roster alone)")
	fs.StringVar(&f.stateDirArg, "state-dir", "", "deprecated: --state `DIR`")
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
	f.cache.Register(fs)
	f.log.Register(fs)
	fs.StringVar(&f.http, "http", "", "`ADDR` (ip:port) to serve Prometheus metrics on, at /metrics, e.g. 127.0.0.1:9470, on a loopback address unless --http-remote (default: none; \"off\": none)")
	fs.BoolVar(&f.httpRemote, "http-remote", false, "let --http listen on an address other machines can reach")
	fs.StringVar(&f.metricsArg, "metrics", "", "deprecated: --http `ADDR`")
	fs.BoolVar(&f.metricsRemoteArg, "metrics-remote", false, "deprecated: --http-remote")
	return &Command{Prog: prog, fs: fs, f: f}
}

// CheckArgs checks the command's positional arguments: none (serve), or
// `config check`.
func CheckArgs(args []string) error {
	if len(args) == 0 || slices.Equal(args, []string{"config", "check"}) {
		return nil
	}
	return fmt.Errorf("unexpected arguments %q: the command takes none, or `config check`", args)
}

// Main runs the command once its flags are parsed: it checks the
// configuration (the file --config names, under the flags given, which
// the parser reports; nil: fs.Visit's), then serves until ctx is done, or,
// for `config check`, prints the settings in effect on stdout. It returns
// the exit code: ExitUsage, ExitConfig (every fault at once), 1 for
// another error, or 0.
func (c *Command) Main(ctx context.Context, stdout, stderr io.Writer, args []string, given map[string]bool) (int, error) {
	if err := CheckArgs(args); err != nil {
		return ExitUsage, err
	}
	warnings, err := c.check(given)
	if err != nil {
		if c.f.log.Format == logging.JSON {
			if log, lerr := logging.New(stderr, logging.Options{Format: logging.JSON}); lerr == nil {
				log.Error(c.Prog+": the configuration is refused", "err", err)
				return ExitConfig, &logging.LoggedError{Err: err}
			}
		}
		return ExitConfig, err
	}
	log, err := c.f.log.Logger(stderr)
	if err != nil { // checked already
		return ExitConfig, err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	if len(args) > 0 { // config check
		path := c.f.config
		if path == "" {
			path = "(no --config)"
		}
		fmt.Fprintf(stdout, "%s: ok\n", path)
		c.fs.VisitAll(func(fl *flag.Flag) {
			if fl.Name == "config" || Deprecated[fl.Name] != "" {
				return
			}
			fmt.Fprintf(stdout, "%s = %s\n", fl.Name, strconv.Quote(fl.Value.String()))
		})
		return 0, nil
	}
	return c.serve(ctx, stderr, log)
}

// Run is the command as a Go flag set parses it (flags before arguments):
// for tests and benchmarks that run it in-process.
func Run(ctx context.Context, prog string, stderr io.Writer, args []string) (int, error) {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := New(prog, fs)
	if err := fs.Parse(args); err != nil {
		return ExitUsage, err
	}
	return c.Main(ctx, stderr, stderr, fs.Args(), nil)
}

// ConfigError is every fault of a configuration, each named where its
// value was set: the file's line for a key the file set, the flag
// otherwise.
type ConfigError = flagfile.FaultsError

// check reads the configuration file (--config), applies it under the
// flags given, and checks every value: the one validation of the command,
// at its start and in `config check`. It returns the warnings to log (a
// deprecated spelling) and, as a *ConfigError, every fault at once.
func (c *Command) check(given map[string]bool) (warnings []string, err error) {
	f := c.f
	if given == nil {
		given = map[string]bool{}
		c.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	}
	set := map[string]bool{} // the command line's and the file's
	for k := range given {
		set[k] = true
	}
	fl := &flagfile.Faults{Path: f.config, Lines: map[string]int{}}
	if f.config != "" {
		data, err := os.ReadFile(f.config)
		if err != nil {
			return nil, &ConfigError{Errs: []error{fmt.Errorf("--config: reading the configuration: %w", err)}}
		}
		fl.Read(flagfile.Read(c.fs, f.config, data, given, "config"))
		for k := range fl.Lines {
			set[k] = true
		}
	}
	for _, old := range slices.Sorted(maps.Keys(Deprecated)) {
		if !set[old] || old == "state-dir" { // checkState's
			continue
		}
		now := Deprecated[old]
		if set[now] {
			fl.Add(old, fmt.Errorf("is the deprecated spelling of --%s, which is set too: keep --%s alone", now, now))
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%s is deprecated: use %s instead", fl.Where(old), spelling(fl, old, now)))
	}
	c.checkState(fl, set, &warnings)
	c.checkHTTP(fl, set)
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"ttl", f.ttl}, {"negative-ttl", f.neg}, {"upstream-timeout", f.timeout}, {"cache-max-ttl", f.cache.MaxTTL}, {"cache-max-negative-ttl", f.cache.MaxNeg}} {
		if d.v < 0 {
			fl.Add(d.key, fmt.Errorf("%q is negative: want a duration of 0 or more, e.g. \"5s\"", d.v))
		}
	}
	if f.cache.Size < 0 {
		fl.Add("cache-size", fmt.Errorf("%d: want 0 (no cache) or more", f.cache.Size))
	}
	if _, err := logging.ParseLevel(f.log.Level); err != nil {
		fl.Add("log-level", err)
	}
	if f.log.Format != logging.Text && f.log.Format != logging.JSON {
		fl.Add("log-format", fmt.Errorf("%q: want text or json", f.log.Format))
	}
	if len(f.listen) == 0 && f.control == "" && f.stateDir == "" {
		fl.Add("listen", errors.New("is required (or --control and --state, for addresses the agent exposes), e.g. --listen 127.0.0.1:5353"))
	}
	if f.roster == "" && f.rosterState == "" && f.control == "" {
		fl.Add("roster", errors.New("is required (or --state holding a saved roster, or --control for the agent to feed it)"))
	}
	return warnings, fl.Err()
}

// spelling is the new key now as the operator writes it where old was
// set: a key in the file, a flag on the command line.
func spelling(fl *flagfile.Faults, old, now string) string {
	if _, ok := fl.Lines[old]; ok {
		return now
	}
	return "--" + now
}

// checkState makes --state (and the deprecated --state-dir) the state
// directory and the saved roster's path. A --state that names a file (one
// ending in .json, or an existing regular file) is the old form, the
// saved roster alone: taken, with a warning.
func (c *Command) checkState(fl *flagfile.Faults, set map[string]bool, warnings *[]string) {
	f := c.f
	if set["state-dir"] {
		f.stateDir = f.stateDirArg
		*warnings = append(*warnings, fl.Where("state-dir")+" is deprecated: use "+spelling(fl, "state-dir", "state")+" instead")
	}
	if v := f.stateArg; v != "" {
		fi, err := os.Stat(v)
		switch {
		case strings.HasSuffix(v, ".json") || err == nil && fi.Mode().IsRegular():
			f.rosterState = v
			*warnings = append(*warnings, fmt.Sprintf("%s %q names a file: that form is deprecated: give --state the directory (its roster is DIR/roster.json)", fl.Where("state"), v))
		case err == nil && !fi.IsDir():
			fl.Add("state", fmt.Errorf("%q is neither a directory nor a file", v))
		default:
			if set["state-dir"] {
				fl.Add("state-dir", fmt.Errorf("is the deprecated spelling of --state DIR, and --state %q names a directory too: keep --state alone", v))
				break
			}
			f.stateDir = v
		}
	}
	if f.rosterState == "" && f.stateDir != "" {
		f.rosterState = filepath.Join(f.stateDir, "roster.json")
	}
}

// checkHTTP checks the metrics endpoint's address (--http, or the
// deprecated --metrics): the endpoint itself binds in the background, and
// would only retry a malformed address.
func (c *Command) checkHTTP(fl *flagfile.Faults, set map[string]bool) {
	f := c.f
	key := "http"
	if !set["http"] && set["metrics"] {
		f.http, key = f.metricsArg, "metrics"
	}
	if !set["http-remote"] && set["metrics-remote"] {
		f.httpRemote = f.metricsRemoteArg
	}
	if f.http == "" || f.http == "off" {
		return
	}
	_, port, err := net.SplitHostPort(f.http)
	if err != nil {
		fl.Add(key, fmt.Errorf("%q: want ip:port, e.g. 127.0.0.1:9470 (or \"off\")", f.http))
		return
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		fl.Add(key, fmt.Errorf("%q: the port %q is not a number from 0 to 65535", f.http, port))
		return
	}
	if err := (netflag.Loopback{Flag: "--http", RemoteFlag: "--http-remote", Serves: "metrics", Example: "127.0.0.1:9470"}).Check(f.http, f.httpRemote); err != nil {
		fl.Add(key, err)
	}
}
