package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBounded is runCLI stopped after d: an agent that takes a refused
// value runs (and returns 0 when stopped) instead of exiting at once.
func runBounded(t *testing.T, d time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	e := &environment{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code = run(ctx, e, args)
	return code, out.String(), errb.String()
}

// TestRefusedConfigValues is the class test of the agent's one
// validation: each refused value, written in agent.toml, is refused by
// `meshhost config check` and by the agent's start with the same fault
// text, naming the file and line, and both exit exitConfig (which the
// unit does not restart).
func TestRefusedConfigValues(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ line, want string }{
		{`interval = "-5s"`, `interval: "-5s" is negative`},
		{`budget = -1`, `budget: -1: want 0 or more`},
		{`budget-window = "-1m"`, `budget-window: "-1m0s" is negative`},
		{`proof-max-age = "-1h"`, `proof-max-age: "-1h0m0s" is negative`},
		{`nats-patience = "-1s"`, `nats-patience: "-1s" is negative`},
		{`cache-size = -1`, `cache-size: -1: want 0 (no cache) or more`},
		{`cache-max-ttl = "-1s"`, `cache-max-ttl: "-1s" is negative`},
		{`cache-max-negative-ttl = "-1s"`, `cache-max-negative-ttl: "-1s" is negative`},
		{`hold-above = -1`, `hold-above: -1: want 0 (never hold) or more`},
		{`http = "9469"`, `http: "9469": want ip:port, e.g. 127.0.0.1:9469`},
		{`http = "127.0.0.1:http"`, `http: "127.0.0.1:http": the port "http" is not a number`},
		{`http = "0.0.0.0:9469"`, `give --http-remote to mean it`},
		{`push = "0.0.0.0:8080"`, `push: "0.0.0.0:8080": only a unix socket or a loopback address is allowed`},
		{`push = "8080"`, `push: "8080": want unix:/path.sock or a loopback ip:port`},
		{`push = "127.0.0.1:8080"`, `push: 127.0.0.1:8080: a TCP push endpoint needs --push-token-file`},
		{`log-level = "wraning"`, `log-level: "wraning" is not a log level: want debug, info, warn (or warning) or error (did you mean warn?)`},
		{`log-level = "loud"`, `log-level: "loud" is not a log level`},
		{`log-format = "xml"`, `log-format: "xml": want text or json`},
		{`runtime = "docker"`, `runtime: "docker": want podman or memory`},
		{`resolver = "tcp:127.0.0.1:1"`, `resolver: "tcp:127.0.0.1:1": want embedded or unix:PATH`},
		{`node-local = "169.254.53"`, `node-local: "169.254.53" is not an IP address`},
		{`loopback = "localhost"`, `loopback: "localhost" is not an IP address`},
		{`probe-outside = "example.org=x"`, `probe-outside: --probe-outside "example.org=x": "x" is not an address`},
		{`source = "http://nats:4222"`, `source: "http://nats:4222": want nats://HOST:PORT`},
		{`machine = ""`, `machine: is empty`},
	} {
		t.Run(tc.line, func(t *testing.T) {
			path := filepath.Join(dir, "agent.toml")
			doc := "state = \"" + filepath.Join(dir, "state") + "\"\n" + tc.line + "\n"
			if !strings.HasPrefix(tc.line, "runtime") {
				doc += "runtime = \"memory\"\n"
			}
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			want := path + ":2: " + tc.want
			if strings.HasPrefix(tc.want, "give") {
				want = tc.want
			}
			// The agent's endpoints off, unless the file's value is the case.
			start := []string{"agent", "--config", path}
			for _, key := range []string{"push", "http"} {
				if !strings.HasPrefix(tc.line, key+" ") {
					start = append(start, "--"+key, "off")
				}
			}
			for _, args := range [][]string{{"config", "check", "--config", path}, start} {
				code, out, stderr := runBounded(t, 10*time.Second, args...)
				if code != exitConfig || !strings.Contains(stderr, want) {
					t.Errorf("meshhost %s (%s) = exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(args[:2], " "), tc.line, code, out, stderr, exitConfig, want)
				}
			}
		})
	}
}

// TestConfigEveryFaultAtOnce: a file with several faults, and without
// podman, is refused naming each, in the file's order.
func TestConfigEveryFaultAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.toml")
	os.WriteFile(path, []byte("interval = \"-5s\"\nbugdet = 3\nbudget = -1\nlog-level = \"warning\"\nhttp = \"9469\"\n"), 0o644)
	env := map[string]string{"MESHHOST_PODMAN_SOCKET": "", "CONTAINER_HOST": ""}
	code, _, stderr := runCLI(t, env, "config", "check", "--config", path)
	want := []string{
		path + ":1: interval: ",
		path + ":2: bugdet: unknown key: no flag --bugdet (did you mean budget?)",
		path + ":3: budget: ",
		path + ":5: http: ",
		"--podman: no podman socket",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(stderr, w)
		if i < 0 || i < last {
			t.Errorf("config check = exit %d, stderr %q; want %q, after the faults before it", code, stderr, w)
		}
		last = i
	}
	if code != exitConfig || strings.Contains(stderr, "log-level") {
		t.Errorf("config check = exit %d, %q; want exit %d, and warning taken as a level", code, stderr, exitConfig)
	}
}

// TestConfigCheckPrintsSettings: config check prints every setting in
// effect, and where it comes from.
func TestConfigCheckPrintsSettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.toml")
	os.WriteFile(path, []byte("runtime = \"memory\"\nlog-level = \"warning\"\n"), 0o644)
	code, out, stderr := runCLI(t, nil, "config", "check", "--config", path, "--budget", "7")
	for _, w := range []string{"runtime = \"memory\"  # file, line 1", "log-level = \"warning\"  # file, line 2", "budget = 7  # flag", "interval = \"30s\"  # default"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("config check = exit %d, %q %q; want %q", code, out, stderr, w)
		}
	}
	code, out, _ = runCLI(t, nil, "config", "check", "--config", path, "--output", "json")
	if code != 0 || !strings.Contains(out, `{"name":"runtime","value":"memory","source":"file","line":1}`) {
		t.Errorf("config check --output json = exit %d, %s", code, out)
	}
}
