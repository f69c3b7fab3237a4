package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// agentFlagNames returns the names of `meshhost agent`'s flags, read from its
// usage.
func agentFlagNames(t *testing.T) []string {
	t.Helper()
	_, usage, _ := runCLI(t, nil, "agent", "-h")
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?--([a-z0-9-]+)`).FindAllStringSubmatch(usage, -1) {
		if m[1] != "help" {
			names = append(names, m[1])
		}
	}
	if len(names) < 20 {
		t.Fatalf("read %d flags from meshhost agent -h:\n%s", len(names), usage)
	}
	return names
}

// TestPackagedConfig: the configuration the package installs
// (packaging/agent.toml) passes `meshhost config check`, and holds every
// flag of the agent, set or commented out with its default, so that a
// flag added to the agent and forgotten there fails here.
func TestPackagedConfig(t *testing.T) {
	const path = "../../packaging/agent.toml"
	code, out, stderr := runCLI(t, nil, "config", "check", "--config", path)
	if code != 0 || !strings.HasPrefix(out, path+": ok (5 settings: declaration, podman, resolver, runtime, state)") {
		t.Fatalf("meshhost config check %s = exit %d, %q %q", path, code, out, stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range regexp.MustCompile(`(?m)^(?:# )?([a-z0-9-]+) = `).FindAllStringSubmatch(string(data), -1) {
		keys = append(keys, m[1])
	}
	for _, f := range agentFlagNames(t) {
		if f != "config" && !slices.Contains(keys, f) {
			t.Errorf("packaging/agent.toml lacks the agent's flag %s (set it, or write it commented out with its default)", f)
		}
	}
	// Every commented key, uncommented, still checks: the defaults written
	// there are values the agent takes.
	uncommented := regexp.MustCompile(`(?m)^# ([a-z0-9-]+ = .*?)(\s+#.*)?$`).ReplaceAllString(string(data), "$1")
	all := filepath.Join(t.TempDir(), "all.toml")
	os.WriteFile(all, []byte(uncommented), 0o644)
	if code, out, stderr := runCLI(t, nil, "config", "check", "--config", all); code != 0 {
		t.Errorf("packaging/agent.toml with every key uncommented: exit %d, %q %q\n%s", code, out, stderr, uncommented)
	}
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(doc string) string {
		p := filepath.Join(dir, "agent.toml")
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, doc string
		args      []string
		code      int
		want      string // in stdout on success, stderr otherwise
	}{
		{"fine", "runtime = \"memory\"\nbudget = 9\n", nil, 0, ": ok (2 settings: budget, runtime)"},
		{"a flag given wins", "runtime = \"memory\"\nbudget = 9\n", []string{"--budget", "5"}, 0, ": ok (1 settings: runtime)"},
		{"unknown key", "runtime = \"memory\"\nbugdet = 9\n", nil, exitConfig, "agent.toml:2: bugdet: unknown key: no flag --bugdet (did you mean budget?)"},
		{"wrong type", "runtime = \"memory\"\nbudget = \"nine\"\n", nil, exitConfig, `agent.toml:2: budget: is "nine", want an integer`},
		{"the agent's own checks", "runtime = \"docker\"\n", nil, exitConfig, `agent.toml:1: runtime: "docker": want podman or memory`},
		{"an address", "runtime = \"memory\"\nnode-local = \"169.254.53\"\n", nil, exitConfig, `agent.toml:2: node-local: "169.254.53" is not an IP address`},
		{"the embedded resolver's flag with the service", "runtime = \"memory\"\nresolver = \"unix:/run/x.sock\"\nupstream = [\"127.0.0.1\"]\n", nil, exitConfig, "agent.toml:3: upstream: is the embedded resolver's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(tc.doc)
			code, out, stderr := runCLI(t, nil, append([]string{"config", "check", "--config", p}, tc.args...)...)
			got := out
			if tc.code != 0 {
				got = stderr
			}
			if code != tc.code || !strings.Contains(got, tc.want) {
				t.Errorf("meshhost config check (%s) = exit %d, stdout %q, stderr %q; want exit %d and %q", tc.doc, code, out, stderr, tc.code, tc.want)
			}
		})
	}
	// The embedded resolver's cache flags with a resolver service change
	// nothing: said, not refused (a file that always set them must not
	// stop the agent after an upgrade); with the embedded one, nothing said.
	for _, tc := range []struct{ doc, warn string }{
		{"runtime = \"memory\"\nresolver = \"unix:/run/x.sock\"\ncache-size = 5\ncache-max-ttl = \"1m\"\n", "flags=--cache-max-ttl,--cache-size"},
		{"runtime = \"memory\"\ncache-size = 5\n", ""},
	} {
		code, _, stderr := runCLI(t, nil, "config", "check", "--config", write(tc.doc))
		warned := strings.Contains(stderr, "the embedded resolver's cache flags are ignored with --resolver unix:")
		if code != 0 || warned != (tc.warn != "") || !strings.Contains(stderr, tc.warn) {
			t.Errorf("config check (%s) = exit %d, stderr %q; want exit 0 and a warning %q", tc.doc, code, stderr, tc.warn)
		}
	}
	code, _, stderr := runCLI(t, nil, "config", "check", "--config", write("runtime = \"memory\"\nresolver = \"unix:/run/x.sock\"\n"), "--cache-size", "7")
	if code != 0 || !strings.Contains(stderr, "flags=--cache-size") {
		t.Errorf("config check with --cache-size given = exit %d, stderr %q; want the warning naming it", code, stderr)
	}

	code, out, _ := runCLI(t, nil, "config", "check", "--config", write("runtime = \"memory\"\nstate = \"/srv/x\"\n"), "--output", "json")
	var got struct {
		Config string   `json:"config"`
		OK     bool     `json:"ok"`
		Keys   []string `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || !got.OK || !slices.Equal(got.Keys, []string{"runtime", "state"}) {
		t.Errorf("config check --output json = exit %d, %s (%v)", code, out, err)
	}
	if code, _, stderr := runCLI(t, nil, "config", "check", "--config", filepath.Join(dir, "missing.toml")); code != exitConfig || !strings.Contains(stderr, "missing.toml: no such file") {
		t.Errorf("config check of a missing file = exit %d, %q", code, stderr)
	}
	for _, args := range [][]string{{"config"}, {"config", "chekc"}, {"config", "check", "extra"}} {
		if code, _, _ := runCLI(t, nil, args...); code != exitUsage {
			t.Errorf("meshhost %q = exit %d, want %d (usage)", args, code, exitUsage)
		}
	}
	code, out, _ = runCLI(t, nil, "config", "check", "--config", write("bugdet = 1\n"), "--output", "json")
	var fault struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &fault); code != exitConfig || err != nil || !strings.Contains(fault.Error, "bugdet: unknown key") {
		t.Errorf("config check --output json of a wrong file = exit %d, %s (%v); want exit 78 and the fault as JSON", code, out, err)
	}
}

// TestUnitPreventsConfigRestart: the agent's unit does not restart it for
// the exit codes of a refused configuration (restarting cannot mend it):
// the codes the agent exits with, read from the unit.
func TestUnitPreventsConfigRestart(t *testing.T) {
	data, err := os.ReadFile("../../packaging/systemd/meshhost-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RestartPreventExitStatus=(.*)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("meshhost-agent.service has no RestartPreventExitStatus=")
	}
	codes := strings.Fields(string(m[1]))
	for _, c := range []int{exitConfig, exitUsage} {
		if !slices.Contains(codes, strconv.Itoa(c)) {
			t.Errorf("RestartPreventExitStatus=%s lacks %d", m[1], c)
		}
	}
}
