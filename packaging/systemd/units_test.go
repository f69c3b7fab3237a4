package systemd

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
			"FileDescriptorStoreMax": "1024", "RuntimeDirectory": "meshhost",
			"Before":                "podman.service",
			"CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
			"DynamicUser":           "yes",
			"ProtectSystem":         "strict",
			"ExecStart":             "--handover",
			// resolvercmd's ExitUsage and ExitConfig
			"RestartPreventExitStatus": "64 78",
		}},
		{"meshhost-agent.service", map[string]string{
			"Type": "notify", "Restart": "always", "WatchdogSec": "s",
			"After":                 "meshhost-resolver.service podman.socket podman.service",
			"ExecReload":            "-HUP",
			"CapabilityBoundingSet": "CAP_NET_BIND_SERVICE",
			"ProtectSystem":         "strict",
			"ExecStart":             "--config /etc/meshhost/agent.toml",
			// cmd/meshhost's exitConfig and exitUsage (TestUnitPreventsConfigRestart there)
			"RestartPreventExitStatus": "64 78",
		}},
	} {
		t.Run(tc.unit, func(t *testing.T) {
			d := directives(t, tc.unit)
			for k, sub := range tc.want {
				if !strings.Contains(strings.Join(d[k], "\n"), sub) {
					t.Errorf("%s: %s=%q, want it to hold %q", tc.unit, k, d[k], sub)
				}
			}
			// CAP_NET_ADMIN served only SO_RCVBUFFORCE, which the resolver
			// does without (resolver/sockopt_linux.go).
			for _, c := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_DAC_OVERRIDE"} {
				if strings.Contains(strings.Join(d["CapabilityBoundingSet"], " "), c) {
					t.Errorf("%s: %s in the bounding set", tc.unit, c)
				}
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
	// The resolver's settings are its configuration file's
	// (internal/resolvercmd's TestPackagedConfiguration checks the two).
	if d := directives(t, "meshhost-resolver.service"); !strings.Contains(strings.Join(d["ExecStart"], " "), "--config /etc/meshhost/resolver.toml") {
		t.Errorf("meshhost-resolver.service: ExecStart=%q lacks --config /etc/meshhost/resolver.toml", d["ExecStart"])
	}
	if d := directives(t, "meshhost-resolver.service"); !strings.Contains(strings.Join(d["ExecStart"], " "), "--control /run/meshhost/resolver.sock") {
		t.Errorf("meshhost-resolver.service: ExecStart=%q lacks --control /run/meshhost/resolver.sock", d["ExecStart"])
	}
	// The sockets' directory is the resolver's alone, and outlives its
	// restarts (the sockets' descriptors do, in the store). A second unit
	// naming it would take it over at each of its starts (systemd chowns
	// a runtime directory to the unit's user), and with it the sockets'
	// files of a resolver that runs as its own user.
	res := directives(t, "meshhost-resolver.service")
	if got := res["RuntimeDirectoryPreserve"]; len(got) != 1 || (got[0] != "restart" && got[0] != "yes") {
		t.Errorf("meshhost-resolver.service: RuntimeDirectoryPreserve=%v, want restart: a restart would remove the sockets' paths", got)
	}
	if got := directives(t, "meshhost-agent.service")["RuntimeDirectory"]; len(got) > 0 {
		t.Errorf("meshhost-agent.service: RuntimeDirectory=%v: /run/meshhost is the resolver's (its user owns it)", got)
	}
	// The agent is root without CAP_DAC_OVERRIDE: it can connect to a
	// socket of the resolver's user only if the socket's mode lets all
	// connect; the resolver's SO_PEERCRED check decides who is served.
	if x := strings.Join(res["ExecStart"], " "); !strings.Contains(x, "--control-mode 0666") {
		t.Errorf("meshhost-resolver.service: ExecStart=%q lacks --control-mode 0666: the agent (root without CAP_DAC_OVERRIDE) cannot connect to a 0600 socket of the resolver's user", x)
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

// maxExposure is the highest overall exposure `systemd-analyze security`
// may rate each unit (0 is best, 10 worst; both were 3.9 before the
// resolver got a user of its own and both units a system call filter).
var maxExposure = map[string]float64{
	"meshhost-resolver.service": 2.0,
	"meshhost-agent.service":    3.0,
}

var overallExposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9]+\.[0-9]+)`)

// TestSecurityExposure rates each unit with systemd-analyze security
// --offline (the unit file alone, not a running service) and fails above
// its maxExposure: a directive dropped or weakened shows here.
func TestSecurityExposure(t *testing.T) {
	analyze := systemdAnalyze(t)
	paths := stageUnits(t, t.TempDir(), nil)
	for i, u := range units {
		t.Run(u, func(t *testing.T) {
			cmd := exec.Command(analyze, "security", "--offline=yes", "--no-pager", paths[i])
			cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice", "SYSTEMD_COLORS=0")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security: %v\n%s", err, out)
			}
			m := overallExposure.FindSubmatch(out)
			if m == nil {
				t.Fatalf("systemd-analyze security printed no overall exposure:\n%s", out)
			}
			got, err := strconv.ParseFloat(string(m[1]), 64)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := maxExposure[u]
			if !ok {
				t.Fatalf("%s has no maxExposure", u)
			}
			t.Logf("%s: overall exposure %.1f (at most %.1f)", u, got, want)
			if got > want {
				t.Errorf("systemd-analyze security rates %s %.1f, want at most %.1f:\n%s", u, got, want, out)
			}
		})
	}
}

// TestOrderedAfterIsWanted: a unit ordered after network-online.target
// also wants it. That target is active (systemd.special(7)): nothing pulls
// it in unless a unit that needs it does, so After= alone orders the unit
// after a target that is not part of the boot, which is no ordering at all.
func TestOrderedAfterIsWanted(t *testing.T) {
	for _, u := range units {
		d := directives(t, u)
		pulled := strings.Fields(strings.Join(append(d["Wants"], d["Requires"]...), " "))
		for _, after := range strings.Fields(strings.Join(d["After"], " ")) {
			if after == "network-online.target" && !slices.Contains(pulled, after) {
				t.Errorf("%s: After=%s without Wants=%s", u, after, after)
			}
		}
	}
}
