package main

// Helpers of the end-to-end tests that run the agent in-process against
// real podman (agent_e2e_test.go, migration_e2e_test.go).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/podmantest"
	"github.com/meshhost/meshhost/migrations"
)

// buildMeshprobe builds cmd/meshprobe into a temporary directory and
// returns its path. CGO_ENABLED=0: the probe image has no libc. The agent
// imports the binary as a probe image named by its hash; the cleanup removes
// that image, so the test leaves no image behind.
func buildMeshprobe(t *testing.T, h *podmantest.Harness) string {
	t.Helper()
	probe := filepath.Join(t.TempDir(), "meshprobe")
	build := exec.Command("go", "build", "-trimpath", "-o", probe, "../meshprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building meshprobe: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	ref := migrations.ProbeImageRepo + ":" + hex.EncodeToString(sum[:8])
	t.Cleanup(func() {
		if out, err := h.Podman("rmi", "--ignore", "-f", ref); err != nil {
			t.Logf("removing the probe image %s: %v: %s", ref, err, out)
		}
	})
	return probe
}

// inProcessAgent is `meshhost agent` running in the test's process through
// run, until stop.
type inProcessAgent struct {
	name   string
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan int
	once   sync.Once
	code   int
}

// startAgent runs `meshhost agent args...` in-process. Its log is written to
// the test's log when the test fails; the cleanup stops it.
func startAgent(t *testing.T, name string, args ...string) *inProcessAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &inProcessAgent{name: name, logs: &syncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		env := &environment{stdout: a.logs, stderr: a.logs, getenv: func(string) string { return "" }}
		a.done <- run(ctx, env, append([]string{"agent"}, args...))
	}()
	t.Cleanup(func() {
		a.stop(t)
		if t.Failed() {
			t.Logf("%s log:\n%s", a.name, a.logs.String())
		}
	})
	return a
}

// stop cancels the agent's context (as SIGTERM does) and returns its exit
// code, failing the test when it does not stop within 30s.
func (a *inProcessAgent) stop(t *testing.T) int {
	t.Helper()
	a.once.Do(func() {
		a.cancel()
		select {
		case a.code = <-a.done:
		case <-time.After(30 * time.Second):
			a.code = -1
			t.Errorf("%s did not stop within 30s", a.name)
		}
	})
	return a.code
}

// pushDeclaration PUTs a declaration document to the agent's push endpoint,
// a unix socket, retrying while the endpoint comes up.
func pushDeclaration(t *testing.T, sock, doc string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	var err error
	for range 100 {
		var resp *http.Response
		req, _ := http.NewRequest(http.MethodPut, "http://agent/v1/declaration", strings.NewReader(doc))
		if resp, err = client.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("pushing a declaration: %s: %s", resp.Status, body)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pushing a declaration: %v", err)
}

// eventually polls ok every 250ms until it holds, failing the test after
// limit.
func eventually(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", limit, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// declDoc is a declaration document for machine.
func declDoc(machine string, gen int, flag string, names map[string]string, containers string) string {
	var entries []string
	for n, a := range names {
		entries = append(entries, fmt.Sprintf("%q: [%q]", n, a))
	}
	return fmt.Sprintf(`{"schema": 1, "machine": %q, "generation": %d, "mesh_names": %q,
	  "roster": {"generation": %d, "zones": ["internal"], "names": {%s}},
	  "containers": %s}`, machine, gen, flag, gen, strings.Join(entries, ", "), containers)
}
