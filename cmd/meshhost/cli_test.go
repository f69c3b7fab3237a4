package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// cliSampleArgs are positional arguments each command that takes some
// accepts (none: the command takes none).
var cliSampleArgs = map[string][]string{
	"completion": {"bash"},
	"config":     {"check"},
	"approve":    {"3"},
	"rollback":   {"3"},
	"dns-check":  {"web", "db"},
	"explain":    {"web"},
	"roster":     {"accept", "3"},
	"migrate":    {"status"},
	"resolver":   {"config", "check"},
}

// TestEveryCommandLine: every command (meshhost's, resolver included)
// prints its help on stdout and exits 0 for -h and --help, exits 64 for an
// unknown flag, and takes flags after its positional arguments (an
// unknown flag there is an unknown flag, not an argument).
func TestEveryCommandLine(t *testing.T) {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range commands {
			if !yield(n) {
				return
			}
		}
	})
	runCmd := func(args ...string) (int, string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var stdout, stderr syncbuf.Buffer
		code := run(ctx, &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }, defaultConfig: "/nonexistent/agent.toml"}, args)
		return code, stdout.String(), stderr.String()
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, h := range []string{"-h", "--help"} {
				code, stdout, stderr := runCmd(name, h)
				if code != exitOK || !strings.Contains(stdout, "Usage:") || stderr != "" {
					t.Errorf("meshhost %s %s: exit %d, stdout %q, stderr %q; want exit 0 and the help on stdout alone", name, h, code, trim(stdout), trim(stderr))
				}
			}
			code, _, stderr := runCmd(name, "--no-such-flag")
			if code != exitUsage || !strings.Contains(stderr, "unknown flag: --no-such-flag") {
				t.Errorf("meshhost %s --no-such-flag: exit %d, stderr %q; want exit 64 naming the flag", name, code, trim(stderr))
			}
			if args, ok := cliSampleArgs[name]; ok {
				argv := append(append([]string{name}, args...), "--no-such-flag")
				code, _, stderr := runCmd(argv...)
				if code != exitUsage || !strings.Contains(stderr, "unknown flag: --no-such-flag") {
					t.Errorf("meshhost %s: exit %d, stderr %q; want exit 64 naming the flag after the arguments", strings.Join(argv, " "), code, trim(stderr))
				}
			}
		})
	}
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// TestOneDefault: no flag's help shows two defaults (its text's and
// pflag's "(default -1)" of a value that means "not given"), and publish
// lists no flag of the agent's alone.
func TestOneDefault(t *testing.T) {
	root := newRoot(context.Background(), &environment{getenv: func(string) string { return "" }}, &outcome{})
	for _, c := range root.Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			zero := f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false" || f.DefValue == "[]" || f.DefValue == "0s"
			if strings.Contains(f.Usage, "(default") && !zero {
				t.Errorf("meshhost %s --%s: its help says a default, and pflag adds (default %s): %q", c.Name(), f.Name, f.DefValue, f.Usage)
			}
		})
	}
	for _, c := range root.Commands() {
		if c.Name() == "publish" && c.Flags().Lookup("nats-patience") != nil {
			t.Errorf("meshhost publish lists --nats-patience, the agent's")
		}
	}
}
