package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/podmantest"
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
	probe := filepath.Join(t.TempDir(), "meshprobe")
	build := exec.Command("go", "build", "-trimpath", "-o", probe, "../meshprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // the probe image has no libc
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building meshprobe: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	machine := strings.TrimSuffix(h.Prefix(), "-")
	push := filepath.Join(state, "push.sock")
	done := make(chan int, 1)
	go func() {
		env := &environment{stdout: logs, stderr: logs, getenv: func(string) string { return "" }}
		done <- run(ctx, env, []string{"agent", "--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
			"--state", state, "--push", "unix:" + push, "--http", "off", "--interval", "1s", "--budget", "10",
			"--upstream", stub.String(), "--probe-binary", probe,
			"--probe-outside", probeOutside + "=" + probeOutsideAddr.String(),
			"--node-local", "169.254.53.99", // not assigned here: the default network uses its gateway
		})
	}()
	defer func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	}()

	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", push)
	}}}
	app := h.Name("app")
	pushDecl := func(gen int, flag string, names map[string]string) {
		t.Helper()
		var entries []string
		for n, a := range names {
			entries = append(entries, fmt.Sprintf("%q: [%q]", n, a))
		}
		doc := fmt.Sprintf(`{"schema": 1, "machine": %q, "generation": %d, "mesh_names": %q,
		  "roster": {"generation": %d, "zones": ["internal"], "names": {%s}},
		  "containers": [{"name": %q, "image": "localhost/meshhost-busybox:latest", "command": ["sleep", "600"], "stop_timeout": "2s"}]}`,
			machine, gen, flag, gen, strings.Join(entries, ", "), app)
		var resp *http.Response
		var err error
		for range 50 { // the endpoint comes up with the agent
			req, _ := http.NewRequest(http.MethodPut, "http://agent/v1/declaration", strings.NewReader(doc))
			if resp, err = client.Do(req); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("pushing generation %d: %v", gen, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("pushing generation %d: %s", gen, resp.Status)
		}
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
		deadline := time.Now().Add(limit)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting until %s", limit, what)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	lookup := func(name string) string {
		out, _ := h.Podman("exec", app, "nslookup", name)
		return out
	}

	// 1. flag on: the probe passes on the default network, so the container
	// is created in resolve mode and asks the agent's resolver.
	pushDecl(1, "on", map[string]string{"alpha.internal": "10.1.1.1"})
	waitUntil("the container runs in resolve mode", 90*time.Second, func() bool {
		return inspect("{{.State.Running}}") == "true" && strings.Contains(inspect("{{.HostConfig.Dns}}"), "10.88.0.1")
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
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("agent exited %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop within 30s")
	}
	if inspect("{{.State.Running}}") != "true" {
		t.Error("the container stopped with the agent")
	}
}
