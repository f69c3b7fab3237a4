package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var units = []string{"meshhost-resolver.service", "meshhost-agent.service"}

// TestVerify runs systemd-analyze verify on every unit, with its binaries
// replaced by executables of the same name (verify checks that ExecStart
// runs), and fails on any complaint, warnings included: an unknown or
// misspelt directive is only a warning, and systemd ignores it.
func TestVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is missing; scripts/podman-up installs Debian's systemd package")
		}
		t.Skip("systemd-analyze is missing (apt-get install systemd; scripts/podman-up does)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	for _, name := range []string{"meshhost", "meshhost-resolver"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var paths []string
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, u)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/", bin+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	cmd := exec.Command(analyze, append([]string{"verify"}, paths...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// directives reads a unit's assignments, continuation lines joined.
func directives(t *testing.T, unit string) map[string][]string {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	var line string
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" || strings.HasPrefix(l, "[") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line += l
		k, v, _ := strings.Cut(line, "=")
		out[k] = append(out[k], v)
		line = ""
	}
	return out
}

// TestContinuityDirectives: what keeps DNS answering is in the units, and
// stays there.
func TestContinuityDirectives(t *testing.T) {
	for _, tc := range []struct {
		unit string
		want map[string]string // key: a substring its value must have
	}{
		{"meshhost-resolver.service", map[string]string{
			"Type": "notify", "Restart": "always", "WatchdogSec": "s",
			"FileDescriptorStoreMax": "1024", "RuntimeDirectoryPreserve": "yes",
			"Before":                "podman.service",
			"CapabilityBoundingSet": "CAP_NET_BIND_SERVICE CAP_NET_ADMIN",
			"ProtectSystem":         "strict",
			"ExecStart":             "--handover",
		}},
		{"meshhost-agent.service", map[string]string{
			"Type": "notify", "Restart": "always", "WatchdogSec": "s",
			"After":                 "meshhost-resolver.service podman.socket podman.service",
			"ExecReload":            "-HUP",
			"CapabilityBoundingSet": "CAP_NET_BIND_SERVICE CAP_NET_ADMIN",
			"ProtectSystem":         "strict",
			"ExecStart":             "--resolver unix:/run/meshhost/resolver.sock",
		}},
	} {
		t.Run(tc.unit, func(t *testing.T) {
			d := directives(t, tc.unit)
			for k, sub := range tc.want {
				if !strings.Contains(strings.Join(d[k], "\n"), sub) {
					t.Errorf("%s: %s=%q, want it to hold %q", tc.unit, k, d[k], sub)
				}
			}
			if strings.Contains(strings.Join(d["CapabilityBoundingSet"], " "), "CAP_SYS_ADMIN") {
				t.Errorf("%s: CAP_SYS_ADMIN in the bounding set", tc.unit)
			}
		})
	}
	// Both units keep the runtime directory their sockets live in.
	for _, u := range units {
		if got := directives(t, u)["RuntimeDirectoryPreserve"]; len(got) != 1 || got[0] != "yes" {
			t.Errorf("%s: RuntimeDirectoryPreserve=%v, want yes: a unit stopping would remove the other's sockets", u, got)
		}
	}
}
