package main

// Helpers of the end-to-end tests that run the agent against real podman,
// in-process (agent_e2e_test.go, migration_e2e_test.go) or as a subprocess
// killed with SIGKILL (faults_e2e_test.go, migration_faults_e2e_test.go;
// those helpers are prefixed "flt").

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
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
	logs   *syncbuf.Buffer
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
	a := &inProcessAgent{name: name, logs: &syncbuf.Buffer{}, cancel: cancel, done: make(chan int, 1)}
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
// a unix socket, retrying for up to 60s while the endpoint comes up.
func pushDeclaration(t *testing.T, sock, doc string) {
	t.Helper()
	if err := fltPusher(sock)(doc); err != nil {
		t.Fatalf("pushing a declaration: %v", err)
	}
}

// healthzOf GETs the agent's /healthz at addr: the status code (0 when
// nothing answered) and the trimmed body (or the error).
func healthzOf(addr netip.AddrPort) (int, string) {
	resp, err := http.Get("http://" + addr.String() + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
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

// createEvents counts podman's create events since a time, per container
// name among names: how many containers were made under each name, so how
// many times each was replaced.
func createEvents(t *testing.T, h *podmantest.Harness, since time.Time, names []string) map[string]int {
	t.Helper()
	out := h.MustPodman("events", "--stream=false", "--since", since.Format(time.RFC3339Nano),
		"--until", time.Now().Add(time.Second).Format(time.RFC3339Nano),
		"--filter", "type=container", "--filter", "event=create", "--format", "{{.Name}}")
	n := map[string]int{}
	for _, name := range strings.Fields(out) {
		if slices.Contains(names, name) {
			n[name]++
		}
	}
	return n
}

// e2eLoopback is the aardvark strategy's address for the agents under
// test: not the production default, so a running agent is never disturbed.
const e2eLoopback = "127.53.0.99"

// fltTags are the build tags the podman bindings need (the Makefile's TAGS).
const fltTags = "-tags=remote,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,containers_image_openpgp"

// fltBuild builds the meshhost binary for a subprocess agent.
func fltBuild(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshhost")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOFLAGS="+fltTags)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building meshhost: %v\n%s", err, out)
	}
	return bin
}

// fltProc is a meshhost agent running as a subprocess.
type fltProc struct {
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
	done chan struct{}
}

func fltStart(t *testing.T, bin string, logs *syncbuf.Buffer, args ...string) *fltProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"agent"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	p := &fltProc{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL and waits until the process is gone.
func (p *fltProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *fltProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// fltObserved is one row of `podman ps` for the test's containers.
type fltObserved struct{ id, name, state string }

// fltPS lists the test's containers through the podman API directly: a
// `podman ps` costs a process start, too slow to catch a replacement's steps.
func fltPS(h *podmantest.Harness) ([]fltObserved, error) {
	return fltList(h, map[string][]string{"name": {"^" + h.Prefix()}})
}

// fltList lists every container (running or not) that podman's list
// filters select, through the podman API directly, as fltPS does.
func fltList(h *podmantest.Harness, filters map[string][]string) ([]fltObserved, error) {
	sock := strings.TrimPrefix(strings.TrimPrefix(h.Socket(), "unix://"), "unix:")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	f, _ := json.Marshal(filters)
	resp, err := client.Get("http://d/v4.0.0/libpod/containers/json?all=true&filters=" + url.QueryEscape(string(f)))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing containers: %s", resp.Status)
	}
	var list []struct {
		ID    string   `json:"Id"`
		Names []string `json:"Names"`
		State string   `json:"State"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var rows []fltObserved
	for _, c := range list {
		if len(c.Names) > 0 {
			rows = append(rows, fltObserved{c.ID, c.Names[0], strings.ToLower(c.State)})
		}
	}
	return rows, nil
}

// fltActions summarizes the "reconcile action" lines of an agent log as
// "container:kind" (the prefix left out).
func fltActions(log, prefix string) string {
	var acts []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="reconcile action`) {
			continue
		}
		var name, kind string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "container="); ok {
				name = strings.TrimPrefix(v, prefix)
			} else if v, ok := strings.CutPrefix(f, "kind="); ok {
				kind = v
			}
		}
		if strings.Contains(line, "action failed") {
			kind += "(failed)"
		}
		acts = append(acts, name+":"+kind)
	}
	if len(acts) == 0 {
		return "no actions"
	}
	return strings.Join(acts, " ")
}
