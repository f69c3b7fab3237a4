package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
)

// TestAgentEndToEnd runs `meshhost agent` against real podman, pushes
// declarations through its endpoint, and checks the container and the DNS
// answers it gets: resolve mode after the probe passes, a name added later
// resolves without a replacement, and the flag set back to off brings the
// copied hosts back.
func TestAgentEndToEnd(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // the agent binds the default network's gateway
	state := t.TempDir()
	probe := buildMeshprobe(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	machine := strings.TrimSuffix(h.Prefix(), "-")
	push := filepath.Join(state, "push.sock")
	agent := startAgent(t, "agent", "--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
		"--state", state, "--push", "unix:"+push, "--http", "off", "--interval", "1s", "--budget", "10",
		"--upstream", stub.String(), "--probe-binary", probe,
		"--probe-outside", probeOutside+"="+probeOutsideAddr.String(),
		"--node-local", "169.254.53.99", // not assigned here: the default network uses its gateway
		"--loopback", e2eLoopback,
	)

	app := h.Name("app")
	pushDecl := func(gen int, flag string, names map[string]string) {
		t.Helper()
		pushDeclaration(t, push, declDoc(machine, gen, flag, names, fmt.Sprintf(
			`[{"name": %q, "image": "localhost/meshhost-busybox:latest", "command": ["sleep", "600"], "stop_timeout": "2s"}]`, app)))
	}
	inspect := func(format string) string {
		out, err := h.Podman("inspect", "--format", format, app)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(out)
	}
	waitUntil := func(what string, limit time.Duration, ok func() bool) {
		t.Helper()
		eventually(t, what, limit, ok)
	}
	lookup := func(name string) string {
		out, _ := h.Podman("exec", app, "nslookup", name)
		return out
	}

	// 1. flag on: the probe passes on the default network, so the container
	// is created in resolve mode and asks the agent's resolver, on the
	// network's gateway (10.88.0.1 on podman's own default network).
	gateway := strings.Fields(h.MustPodman("network", "inspect", "--format", "{{range .Subnets}}{{.Gateway}} {{end}}", "podman"))[0]
	pushDecl(1, "on", map[string]string{"alpha.internal": "10.1.1.1"})
	waitUntil("the container runs in resolve mode", 90*time.Second, func() bool {
		return inspect("{{.State.Running}}") == "true" && inspect("{{.HostConfig.Dns}}") == "["+gateway+"]"
	})
	waitUntil("alpha.internal resolves inside the container", 20*time.Second, func() bool {
		return strings.Contains(lookup("alpha.internal"), "10.1.1.1")
	})
	id := inspect("{{.Id}}")

	// 2. The crux: a name added after the container was created resolves in
	// it, and the roster change replaces nothing.
	pushDecl(2, "on", map[string]string{"alpha.internal": "10.1.1.1", "beta.internal": "10.1.1.2"})
	waitUntil("beta.internal resolves inside the container", 20*time.Second, func() bool {
		return strings.Contains(lookup("beta.internal"), "10.1.1.2")
	})
	time.Sleep(2 * time.Second) // at least one more pass
	if got := inspect("{{.Id}}"); got != id {
		t.Fatalf("a roster change replaced the container: %s -> %s", id, got)
	}

	// 3. flag off is the rollback: the container is replaced once, into copy
	// mode, and its hosts carry the roster again.
	pushDecl(3, "off", map[string]string{"alpha.internal": "10.1.1.1", "beta.internal": "10.1.1.2"})
	waitUntil("the container is back in copy mode with the roster in /etc/hosts", 60*time.Second, func() bool {
		hosts, err := h.Podman("exec", app, "cat", "/etc/hosts")
		return err == nil && strings.Contains(hosts, "10.1.1.2\tbeta.internal")
	})
	if got := inspect("{{.Id}}"); got == id {
		t.Error("switching the flag off did not replace the container")
	}

	// SIGTERM (here: the context) stops the agent, never the containers.
	if code := agent.stop(t); code != 0 {
		t.Errorf("agent exited %d", code)
	}
	if inspect("{{.State.Running}}") != "true" {
		t.Error("the container stopped with the agent")
	}
}
