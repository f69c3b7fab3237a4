package main

// Issue 7: probe containers an agent killed mid-probe left behind are
// swept when the next agent starts. Helpers here are prefixed "sw".

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/migrations"
)

// TestAgentSweepsLeftoverProbes makes by hand what an agent killed with
// SIGKILL mid-probe leaves: its probe containers (labelled
// io.meshhost.probe and io.meshhost.probe-owner=<this machine>), one
// running `sleep`, one exited. Next to them: a container without the probe
// label, a probe container of another machine, and a recent probe
// container without an owner (it may be a `meshhost probe` at work). The
// agent, started on real podman, removes the first two (logged with their
// names and why) and leaves the other three as they were.
func TestAgentSweepsLeftoverProbes(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t)
	ctx := t.Context()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	machine := strings.TrimSuffix(h.Prefix(), "-")
	nonce := func() string {
		var b [8]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	// run starts a container labelled labels (plus the harness's label, so
	// that the cleanup removes whatever is left) and returns its ID.
	run := func(name string, detach bool, labels map[string]string, cmd ...string) string {
		args := []string{"run", "--name", name, "--label", podmantest.Label + "=" + h.Prefix()}
		if detach {
			args = append(args, "-d")
		}
		for k, v := range labels {
			args = append(args, "--label", k+"="+v)
		}
		h.MustPodman(append(append(args, podmantest.Image), cmd...)...)
		return h.MustPodman("inspect", "--format", "{{.Id}}", name)
	}
	probeLabels := func(owner string) map[string]string {
		l := map[string]string{migrations.LabelProbe: nonce()}
		if owner != "" {
			l[migrations.LabelProbeOwner] = owner
		}
		return l
	}
	leftRunning := "meshhost-probe-" + nonce()
	leftExited := "meshhost-probe-" + nonce()
	run(leftRunning, true, probeLabels(machine), "sleep", "600")
	run(leftExited, false, probeLabels(machine), "true")
	keep := map[string]string{} // name -> ID
	neighbour, other, unowned := h.Name("neighbour"), "meshhost-probe-"+nonce(), "meshhost-probe-"+nonce()
	keep[neighbour] = run(neighbour, true, nil, "sleep", "600")
	keep[other] = run(other, true, probeLabels("another-"+machine), "sleep", "600")
	keep[unowned] = run(unowned, true, probeLabels(""), "sleep", "600")

	logs, _, stop := fltInProcess(t, "--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
		"--state", t.TempDir(), "--push", "off", "--http", "off", "--interval", "1s",
		"--probe-binary", "/nonexistent", "--upstream", stub.String(), "--node-local", "169.254.53.99", "--loopback", e2eLoopback)
	exists := func(name string) bool {
		out, _ := h.Podman("ps", "-a", "--format", "{{.Names}}", "--filter", "name=^"+name+"$")
		return strings.TrimSpace(out) == name
	}
	eventually(t, "the leftover probe containers are gone", 30*time.Second, func() bool {
		return !exists(leftRunning) && !exists(leftExited)
	})
	time.Sleep(2 * time.Second) // a few passes: nothing else goes
	stop()
	for name, id := range keep {
		out, err := h.Podman("inspect", "--format", "{{.Id}} {{.State.Status}}", name)
		if err != nil || out != id+" running" {
			t.Errorf("%s: %q, %v; want it untouched (%.12s running)", name, out, err, id)
		}
	}
	var lines []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "removed a probe container left behind") {
			lines = append(lines, line)
		}
	}
	t.Logf("the agent logged:\n%s", strings.Join(lines, "\n"))
	for _, name := range []string{leftRunning, leftExited} {
		found := false
		for _, line := range lines {
			found = found || strings.Contains(line, "container="+name) && strings.Contains(line, "killed mid-probe")
		}
		if !found {
			t.Errorf("the removal of %s is not logged with its name and why", name)
		}
	}
	if len(lines) != 2 {
		t.Errorf("the agent logged %d removals, want 2", len(lines))
	}
}
