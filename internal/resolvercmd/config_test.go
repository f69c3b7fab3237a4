package resolvercmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// TestConfigFileFaults: each bad value of resolver.toml is refused at the
// start (exit 78) and by config check with the same text, naming the
// file, the line and the key; and every fault of a file at once.
func TestConfigFileFaults(t *testing.T) {
	dir := t.TempDir()
	sound := "listen = [\"127.0.0.1:5353\"]\nroster = \"r.json\"\n"
	for _, c := range []struct {
		line string
		want string // after "FILE:3: "
	}{
		{`http = "9470"`, `http: "9470": want ip:port`},
		{`http = "0.0.0.0:9470"`, `http: 0.0.0.0:9470: not a loopback address`},
		{`metrics = "10.1.2.3:9470"`, `metrics: 10.1.2.3:9470: not a loopback address`},
		{`http = "127.0.0.1:99999"`, `http: "127.0.0.1:99999": the port "99999" is not a number`},
		{`ttl = "-1s"`, `ttl: "-1s" is negative`},
		{`negative-ttl = "-1s"`, `negative-ttl: "-1s" is negative`},
		{`upstream-timeout = "-2s"`, `upstream-timeout: "-2s" is negative`},
		{`cache-size = -1`, `cache-size: -1: want 0 (no cache) or more`},
		{`cache-max-ttl = "-1m"`, `cache-max-ttl: "-1m0s" is negative`},
		{`cache-max-negative-ttl = "-1m"`, `cache-max-negative-ttl: "-1m0s" is negative`},
		{`log-level = "loud"`, `log-level: "loud" is not a log level`},
		{`log-format = "xml"`, `log-format: "xml": want text or json`},
		{`ttl = "5 s"`, `ttl: "5 s" is not a duration`},
		{`ttl = 5`, `ttl:`},
		{`upstream = ["nonsense"]`, `upstream: invalid value "nonsense"`},
		{`allow = ["10.0.0.0/99"]`, `allow: invalid value "10.0.0.0/99"`},
		{`control-mode = "999"`, `control-mode: invalid value "999"`},
		{`lsiten = ["127.0.0.1:53"]`, `lsiten: unknown key`},
		{`state = "/dev/null"`, `state: "/dev/null" is neither a directory nor a file`},
		{`config = "other.toml"`, `config:`},
	} {
		path := filepath.Join(dir, "resolver.toml")
		if err := os.WriteFile(path, []byte(sound+c.line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		want := path + ":3: " + c.want
		start, startCode := runForTest(t, "--config", path)
		check, checkCode := runForTest(t, "--config", path, "config", "check")
		if startCode != ExitConfig || checkCode != ExitConfig {
			t.Errorf("%s: the start exited %d, config check %d; want %d for both", c.line, startCode, checkCode, ExitConfig)
		}
		if !strings.HasPrefix(start, want) {
			t.Errorf("%s: the start said %q, want %q", c.line, start, want)
		}
		if start != check {
			t.Errorf("%s: the start said %q, config check %q: want the same", c.line, start, check)
		}
	}

	// Every fault at once, in the file's order.
	path := filepath.Join(dir, "every.toml")
	os.WriteFile(path, []byte("ttl = \"-1s\"\nhttp = \"9470\"\nbogus = 1\nlog-level = \"loud\"\n"), 0o644)
	got, code := runForTest(t, "--config", path, "config", "check")
	lines := strings.Split(got, "\n")
	if code != ExitConfig || len(lines) < 4 {
		t.Fatalf("config check of four faults: exit %d, %q", code, got)
	}
	for i, key := range []string{"ttl", "http", "bogus", "log-level"} {
		if p := fmt.Sprintf("%s:%d: %s: ", path, i+1, key); !strings.HasPrefix(lines[i], p) {
			t.Errorf("fault %d is %q, want it to begin %q", i+1, lines[i], p)
		}
	}
}

// runForTest runs the command with args (flags first: Run parses them
// with Go's flag package) for a moment and returns its
// error's text and its exit code.
func runForTest(t *testing.T, args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var stderr syncbuf.Buffer
	code, err := Run(ctx, "test", &stderr, args)
	if err == nil {
		return "", code
	}
	return err.Error(), code
}

// TestDeprecatedSpellings: the old spellings (--metrics, --metrics-remote,
// --state-dir, --state naming a file) still work, on the command line and
// in the file, each with a warning naming the new one; the old and the
// new spelling of one setting together are refused.
func TestDeprecatedSpellings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "saved.json")
	regular := filepath.Join(dir, "saved-roster")
	os.WriteFile(regular, nil, 0o600)
	base := []string{"--listen", "127.0.0.1:5353", "--roster", "r.json"}
	for _, c := range []struct {
		args                  []string
		http                  string
		remote                bool
		stateDir, rosterState string
		warn                  string
	}{
		{[]string{"--metrics", "127.0.0.1:9470"}, "127.0.0.1:9470", false, "", "", "--metrics is deprecated: use --http instead"},
		{[]string{"--metrics", "10.0.0.1:9470", "--metrics-remote"}, "10.0.0.1:9470", true, "", "", "--metrics-remote is deprecated: use --http-remote instead"},
		{[]string{"--state-dir", dir}, "", false, dir, filepath.Join(dir, "roster.json"), "--state-dir is deprecated: use --state instead"},
		{[]string{"--state", file}, "", false, "", file, `--state "` + file + `" names a file: that form is deprecated`},
		{[]string{"--state", regular}, "", false, "", regular, `--state "` + regular + `" names a file: that form is deprecated`},
		{[]string{"--state", file, "--state-dir", dir}, "", false, dir, file, "--state-dir is deprecated"},
		// The new spellings, without a warning.
		{[]string{"--http", "127.0.0.1:9470"}, "127.0.0.1:9470", false, "", "", ""},
		{[]string{"--state", dir}, "", false, dir, filepath.Join(dir, "roster.json"), ""},
	} {
		c0, warnings, err := parseForTest(append(base, c.args...)...)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		f := c0.f
		if f.http != c.http || f.httpRemote != c.remote || f.stateDir != c.stateDir || f.rosterState != c.rosterState {
			t.Errorf("%q: http %q remote %t, state dir %q, saved roster %q; want %q %t %q %q", c.args, f.http, f.httpRemote, f.stateDir, f.rosterState, c.http, c.remote, c.stateDir, c.rosterState)
		}
		joined := strings.Join(warnings, "\n")
		if c.warn == "" && joined != "" || !strings.Contains(joined, c.warn) {
			t.Errorf("%q: warnings %q, want one with %q", c.args, joined, c.warn)
		}
	}
	// In the file: the warning names its line.
	path := filepath.Join(dir, "resolver.toml")
	os.WriteFile(path, []byte("listen = [\"127.0.0.1:5353\"]\nroster = \"r.json\"\nmetrics = \"127.0.0.1:9470\"\n"), 0o644)
	c0, warnings, err := parseForTest("--config", path)
	if err != nil || c0.f.http != "127.0.0.1:9470" || len(warnings) != 1 || warnings[0] != path+":3: metrics is deprecated: use http instead" {
		t.Errorf("metrics in the file: %v, http %q, warnings %q", err, c0.f.http, warnings)
	}
	// Both spellings of one setting: refused, naming both.
	for _, args := range [][]string{
		{"--metrics", "127.0.0.1:1", "--http", "127.0.0.1:2"},
		{"--state", dir, "--state-dir", dir},
	} {
		if _, _, err := parseForTest(append(base, args...)...); err == nil || !strings.Contains(err.Error(), "deprecated spelling") {
			t.Errorf("%q: %v, want refused as both spellings", args, err)
		}
	}
	// The warning reaches the log at the start.
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	Run(ctx, "test", &stderr, append(base, "--metrics", "127.0.0.1:9470", "config", "check"))
	if !strings.Contains(stderr.String(), "level=WARN") || !strings.Contains(stderr.String(), "--metrics is deprecated: use --http instead") {
		t.Errorf("config check with --metrics logged %q, want the warning", stderr.String())
	}
}
