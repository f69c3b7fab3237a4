package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
)

// TestLoadPodmanMigration is issue 7's real-podman figure: 50 containers on
// this machine, a timed no-op pass, and a timed full migration from copied
// names to the resolver (each container replaced once) and back. It runs
// only with MESHHOST_LOAD=1 (scripts/bench-load-podman): minutes of podman.
func TestLoadPodmanMigration(t *testing.T) {
	if os.Getenv("MESHHOST_LOAD") == "" {
		t.Skip("set MESHHOST_LOAD=1 to run (scripts/bench-load-podman)")
	}
	const n = 50
	h := podmantest.New(t)
	podmantest.Exclusive(t)
	probe := buildMeshprobe(t, h)
	ctx := t.Context()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	machine := strings.TrimSuffix(h.Prefix(), "-")
	state := t.TempDir()
	push := filepath.Join(state, "push.sock")
	var cs []string
	for i := range n {
		cs = append(cs, fmt.Sprintf(`{"name": %q, "image": "localhost/meshhost-busybox:latest",
		  "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"], "stop_timeout": "5s"}`, h.Name(fmt.Sprint(i))))
	}
	containers := "[" + strings.Join(cs, ",") + "]"
	names := map[string]string{"alpha.internal": "10.1.1.1"}
	a := startAgent(t, "agent", "--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
		"--state", state, "--push", "unix:"+push, "--http", "off", "--interval", "2s", "--budget", "1000",
		"--upstream", stub.String(), "--probe-binary", probe,
		"--probe-outside", probeOutside+"="+probeOutsideAddr.String(), "--node-local", "169.254.53.99", "--loopback", e2eLoopback)

	// converged reports whether all n containers run, resolving names
	// through the resolver (resolve) or not.
	converged := func(resolve bool) bool {
		out, err := h.Podman("ps", "-q", "--filter", "label=io.meshhost.owner="+machine)
		if err != nil || len(strings.Fields(out)) != n {
			return false
		}
		want := 0
		if resolve {
			want = n
		}
		return dnsCount(h, machine) == want
	}

	// Deploy in copy mode.
	t0 := time.Now()
	pushDeclaration(t, push, declDoc(machine, 1, "off", names, containers))
	eventually(t, "50 containers run in copy mode", 5*time.Minute, func() bool { return converged(false) })
	deploy := time.Since(t0)

	// A no-op pass, as `meshhost plan` makes it: one List, nothing to do.
	time.Sleep(3 * time.Second)
	noop := timeNoopPlan(t, state)

	// The migration: flag on, the default network's probe passes, every
	// container is replaced once into resolve mode.
	t0 = time.Now()
	pushDeclaration(t, push, declDoc(machine, 2, "on", names, containers))
	eventually(t, "50 containers run in resolve mode", 10*time.Minute, func() bool { return converged(true) })
	migrate := time.Since(t0)

	// And back.
	t0 = time.Now()
	pushDeclaration(t, push, declDoc(machine, 3, "off", names, containers))
	eventually(t, "50 containers run in copy mode again", 10*time.Minute, func() bool { return converged(false) })
	back := time.Since(t0)
	a.stop(t)
	t.Logf("50 containers on podman: deploy %s, no-op pass %s, migration to resolve mode %s, back to copy mode %s",
		deploy.Round(time.Millisecond), noop.Round(time.Millisecond), migrate.Round(time.Millisecond), back.Round(time.Millisecond))
}

// dnsCount counts the machine's running containers created with DNS
// servers (resolve mode).
func dnsCount(h *podmantest.Harness, machine string) int {
	out, err := h.Podman("ps", "-q", "--filter", "label=io.meshhost.owner="+machine)
	if err != nil {
		return -1
	}
	ids := strings.Fields(out)
	if len(ids) == 0 {
		return 0
	}
	out, err = h.Podman(append([]string{"inspect", "--format", "{{len .HostConfig.Dns}}"}, ids...)...)
	if err != nil {
		return -1
	}
	count := 0
	for _, f := range strings.Fields(out) {
		if f != "0" {
			count++
		}
	}
	return count
}

// timeNoopPlan times `meshhost plan` on the agent's state after
// convergence: the same List and judging as a pass that has nothing to do.
func timeNoopPlan(t *testing.T, state string) time.Duration {
	t.Helper()
	start := time.Now()
	code, out, stderr := runCLI(t, map[string]string{"MESHHOST_PODMAN_SOCKET": os.Getenv("MESHHOST_PODMAN_SOCKET")},
		"plan", "--state", state)
	if code != 0 {
		t.Fatalf("meshhost plan after convergence = exit %d, want 0 (nothing to do)\n%s%s", code, out, stderr)
	}
	return time.Since(start)
}
