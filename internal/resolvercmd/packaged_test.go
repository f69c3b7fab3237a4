package resolvercmd

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// unitExecStart is the packaged unit's ExecStart=, as arguments, with
// its paths moved into dir (and the configuration file the repository's).
func unitExecStart(t *testing.T, dir string) []string {
	data, err := os.ReadFile("../../packaging/systemd/meshhost-resolver.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=((?:.*\\\n)*.*)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("meshhost-resolver.service has no ExecStart=")
	}
	args := strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
	if args[0] != "/usr/bin/meshhost-resolver" {
		t.Fatalf("ExecStart= runs %s", args[0])
	}
	conf, err := filepath.Abs("../../packaging/resolver.toml")
	if err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer(DefaultConfig, conf, "/var/lib/meshhost-resolver", filepath.Join(dir, "state"), "/run/meshhost", dir)
	for i := range args {
		args[i] = r.Replace(args[i])
	}
	return args[1:]
}

// TestPackagedConfiguration: the packaged unit's command line, with the
// packaged resolver.toml, passes the resolver's check without a warning,
// serves metrics where the package says (127.0.0.1:9470), and every
// default the file's comments state is the flag's.
func TestPackagedConfiguration(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "state"), 0o700)
	args := unitExecStart(t, dir)
	c, warnings, err := parseForTest(args...)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the unit's command line %q: %v, warnings %q", args, err, warnings)
	}
	if c.f.http != "127.0.0.1:9470" || c.f.stateDir != filepath.Join(dir, "state") {
		t.Errorf("http %q, state %q", c.f.http, c.f.stateDir)
	}

	data, err := os.ReadFile("../../packaging/resolver.toml")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	New("test", fs)
	commented := regexp.MustCompile(`(?m)^# ([a-z-]+) = ("[^"]*"|[0-9]+|true|false|\[\])`)
	n := 0
	for _, m := range commented.FindAllStringSubmatch(string(data), -1) {
		key, v := m[1], m[2]
		fl := fs.Lookup(key)
		if fl == nil {
			t.Errorf("resolver.toml: # %s: no such flag", key)
			continue
		}
		n++
		if v == "[]" {
			continue // a list's default: none
		}
		if s, err := strconv.Unquote(v); err == nil {
			v = s
		}
		def := flag.NewFlagSet("def", flag.ContinueOnError)
		def.SetOutput(io.Discard)
		New("def", def)
		if err := def.Set(key, v); err != nil {
			t.Errorf("resolver.toml: # %s = %s: %v", key, m[2], err)
			continue
		}
		if got := def.Lookup(key).Value.String(); got != fl.DefValue {
			t.Errorf("resolver.toml says # %s = %s, but its default is %q", key, m[2], fl.DefValue)
		}
	}
	if n < 10 {
		t.Errorf("resolver.toml: only %d defaults in comments", n)
	}
	// Every flag of the resolver is in the file, set or commented out,
	// except those of the unit's command line and the deprecated ones.
	for _, name := range []string{"http", "upstream", "resolv-conf", "upstream-timeout", "cache-size", "cache-max-ttl",
		"cache-max-negative-ttl", "ttl", "negative-ttl", "listen", "allow", "log-format", "log-level", "http-remote"} {
		if !regexp.MustCompile(`(?m)^(# )?` + regexp.QuoteMeta(name) + ` = `).Match(data) {
			t.Errorf("resolver.toml does not name %s", name)
		}
	}
}
