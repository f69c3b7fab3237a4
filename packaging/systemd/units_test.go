package systemd

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var units = []string{"meshhost-resolver.service", "meshhost-agent.service"}

// TestVerify runs systemd-analyze verify on every unit, with its binaries
// replaced by executables of the same name (verify checks that ExecStart
// runs), and fails on any complaint, warnings included: an unknown or
// misspelt directive is only a warning, and systemd ignores it.
func TestVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	paths := stageUnits(t, t.TempDir(), nil)
	out, err := verify(analyze, paths...)
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// podmanUnits are stand-ins for Debian's podman units (podman 4.3.1 and
// 5.x ship them alike), which the units order themselves against. The
// socket is what matters: like every socket unit it is ordered before
// sockets.target, which basic.target, and so every service of the boot
// transaction, is ordered after.
var podmanUnits = map[string]string{
	"podman.socket": `[Unit]
Description=Podman API Socket
Documentation=man:podman-system-service(1)

[Socket]
ListenStream=%t/podman/podman.sock
SocketMode=0660

[Install]
WantedBy=sockets.target
`,
	"podman.service": `[Unit]
Description=Podman API Service
Requires=podman.socket
After=podman.socket
Documentation=man:podman-system-service(1)
StartLimitIntervalSec=0

[Service]
Delegate=true
Type=exec
KillMode=process
ExecStart=/usr/bin/podman system service

[Install]
WantedBy=default.target
`,
	"podman-restart.service": `[Unit]
Description=Podman Start All Containers With Restart Policy Set To Always
Documentation=man:podman-start(1)
StartLimitIntervalSec=0
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
RemainAfterExit=true
ExecStart=/usr/bin/podman start --all --filter restart-policy=always

[Install]
WantedBy=default.target
`,
	// The boot: multi-user.target, which the units are WantedBy, as a
	// target verify can start on its own, pulling in what a boot does.
	"meshhost-boot.target": `[Unit]
Description=stand-in for multi-user.target at boot
Requires=basic.target
After=basic.target
Wants=meshhost-resolver.service meshhost-agent.service podman.socket podman.service podman-restart.service
`,
}

// TestBootOrdering verifies a boot transaction: the units with podman's as
// Debian ships them, started together from a stand-in for multi-user.target
// (with the default dependencies, basic.target and sockets.target, that
// come with it). An ordering cycle is not an error to systemd: it deletes
// one of the jobs to break it and boots on, without that unit (once it was
// sockets.target, podman's API socket with it, when the resolver was
// ordered before podman.socket).
func TestBootOrdering(t *testing.T) {
	analyze := systemdAnalyze(t)
	paths := stageUnits(t, t.TempDir(), podmanUnits)
	out, err := verify(analyze, paths...)
	if err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "ordering cycle") || strings.Contains(line, "deleted to break") {
			t.Errorf("the boot transaction has an ordering cycle:\n%s", out)
			return
		}
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Logf("systemd-analyze verify (stand-ins included):\n%s", s)
	}
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is missing; scripts/podman-up installs Debian's systemd package")
		}
		t.Skip("systemd-analyze is missing (apt-get install systemd; scripts/podman-up does)")
	}
	return analyze
}

// stageUnits writes the units, and the extra ones given by name, into dir
// with /usr/bin/ pointing at stand-in executables (verify checks that
// ExecStart runs), and returns their paths, the units' first.
func stageUnits(t *testing.T, dir string, extra map[string]string) []string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	for _, name := range []string{"meshhost", "meshhost-resolver", "podman"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(data, "/usr/bin/", bin+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var paths []string
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, write(u, string(data)))
	}
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		paths = append(paths, write(name, extra[name]))
	}
	return paths
}

func verify(analyze string, paths ...string) ([]byte, error) {
	cmd := exec.Command(analyze, append([]string{"verify"}, paths...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice")
	return cmd.CombinedOutput()
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
			"ExecStart":             "--config /etc/meshhost/agent.toml",
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
	// The agent's configuration feeds the resolver the unit runs.
	conf, err := os.ReadFile("../agent.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "\nresolver = \"unix:/run/meshhost/resolver.sock\"\n") {
		t.Errorf("packaging/agent.toml does not point the agent at the resolver unit's control socket")
	}
	if d := directives(t, "meshhost-resolver.service"); !strings.Contains(strings.Join(d["ExecStart"], " "), "--control /run/meshhost/resolver.sock") {
		t.Errorf("meshhost-resolver.service: ExecStart=%q lacks --control /run/meshhost/resolver.sock", d["ExecStart"])
	}
	// Both units keep the runtime directory their sockets live in.
	for _, u := range units {
		if got := directives(t, u)["RuntimeDirectoryPreserve"]; len(got) != 1 || got[0] != "yes" {
			t.Errorf("%s: RuntimeDirectoryPreserve=%v, want yes: a unit stopping would remove the other's sockets", u, got)
		}
	}
	// Neither unit ever gives up restarting: with the default start limit
	// (5 starts in 10 s), a short crash loop at RestartSec=100ms leaves the
	// resolver failed for good, and systemd releases its stored sockets.
	// (TestVerify fails on the directive in the wrong section.)
	for _, u := range units {
		if got := directives(t, u)["StartLimitIntervalSec"]; len(got) != 1 || got[0] != "0" {
			t.Errorf("%s: StartLimitIntervalSec=%v, want 0: the default start limit stops the restarts of a crash loop for good", u, got)
		}
	}
}
