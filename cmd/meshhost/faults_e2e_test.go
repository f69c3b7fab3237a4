package main

// Fault tests on real podman (issue 7, point 2): the agent killed with
// SIGKILL in the middle of replacements, the podman API service restarted
// mid-pass, and the declaration source gone (SIGKILL in the middle of a
// migration: migration_faults_e2e_test.go). Helpers are prefixed "flt" so
// that they never collide with other e2e helpers; those the SIGKILL tests
// share (fltBuild, fltStart, fltPS, fltActions) are in e2e_helpers_test.go.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// fltPusher pushes declaration documents to an agent's unix socket,
// retrying for up to 60s while the endpoint comes up.
func fltPusher(sock string) func(doc string) error {
	return fltPusherWithin(sock, 60*time.Second)
}

// fltPusherWithin is fltPusher retrying for up to limit.
func fltPusherWithin(sock string, limit time.Duration) func(doc string) error {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	return func(doc string) error {
		var err error
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); { // the endpoint comes up with the agent
			var resp *http.Response
			req, _ := http.NewRequest(http.MethodPut, "http://agent/v1/declaration", strings.NewReader(doc))
			if resp, err = client.Do(req); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("push: %s: %s", resp.Status, body)
				}
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("push: %w", err)
	}
}

// fltRoster returns roster JSON of generation gen: alpha.internal and
// n1..n<gen>.internal, so that every generation adds a name and drops none.
func fltRoster(gen int) string {
	r := decltest.NewRoster(uint64(gen)).Name("alpha.internal", "10.1.1.1")
	for i := 1; i <= gen; i++ {
		r.Name(fmt.Sprintf("n%d.internal", i), fmt.Sprintf("10.2.0.%d", i))
	}
	return string(r.JSON())
}

// TestAgentSIGKILLMidReplacement kills the agent (a subprocess) with SIGKILL
// at several points of a roster change that, in copy mode, replaces every
// container, restarts it on the same state directory each time, and checks
// that the machine converges with nothing lost and nothing replaced twice:
// each declared container exists once and runs, no NAME.meshhost-old is
// left, the named volume keeps its file, every container carries the last
// roster in its hosts, and the only IDs ever seen under a container's name
// during one roster change are the one before and the one after it.
func TestAgentSIGKILLMidReplacement(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // its agent binds the default network's gateway
	bin := fltBuild(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	sock := filepath.Join(state, "push.sock")
	machine := strings.TrimSuffix(h.Prefix(), "-")
	logs := &syncbuf.Buffer{}
	defer func() {
		if t.Failed() {
			t.Logf("agent logs (all runs):\n%s", logs.String())
		}
	}()
	start := func() *fltProc {
		fmt.Fprintf(logs, "=== agent started at %s\n", time.Now().Format(time.StampMilli))
		return fltStart(t, bin, logs, "--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
			"--state", state, "--push", "unix:"+sock, "--http", "off", "--interval", "1s", "--budget", "100",
			"--probe-binary", "/nonexistent", "--upstream", stub.String(), "--node-local", "169.254.53.99", "--loopback", e2eLoopback)
	}
	push := fltPusher(sock)

	plain, data, checked := h.Name("plain"), h.Name("data"), h.Name("checked")
	names := []string{plain, data, checked}
	vol := h.Name("vol")
	const cmd = `["sh", "-c", "trap \"exit 0\" TERM; sleep 600 & wait"]`
	decl := func(gen int) string {
		return fmt.Sprintf(`{"schema": 1, "machine": %q, "generation": %d, "mesh_names": "off", "roster": %s, "containers": [
		  {"name": %q, "image": %q, "command": %s, "stop_timeout": "5s"},
		  {"name": %q, "image": %q, "command": %s, "stop_timeout": "5s", "mounts": [{"type": "volume", "source": %q, "target": "/data"}]},
		  {"name": %q, "image": %q, "command": %s, "stop_timeout": "5s", "healthcheck": {"test": ["/bin/true"], "interval": "1s"}}]}`,
			machine, gen, fltRoster(gen), plain, podmantest.Image, cmd, data, podmantest.Image, cmd, vol,
			checked, podmantest.Image, cmd)
	}
	hostsOf := func(name string) string {
		out, _ := h.Podman("inspect", "--format", "{{.HostConfig.ExtraHosts}}", name)
		return out
	}
	// converged: every container runs once under its name with roster gen
	// in its hosts, and nothing waits aside.
	converged := func(gen int) (map[string]string, bool) {
		rows, err := fltPS(h)
		if err != nil {
			return nil, false
		}
		ids := map[string]string{}
		for _, r := range rows {
			if strings.HasSuffix(r.name, reconcile.AsideSuffix) || r.state != "running" {
				return nil, false
			}
			ids[r.name] = r.id
		}
		for _, n := range names {
			if ids[n] == "" || !strings.Contains(hostsOf(n), fmt.Sprintf("n%d.internal:10.2.0.%d", gen, gen)) {
				return nil, false
			}
		}
		return ids, len(ids) == len(names)
	}

	agent := start()
	if err := push(decl(1)); err != nil {
		t.Fatal(err)
	}
	var ids map[string]string
	eventually(t, "the three containers run with roster 1", 60*time.Second, func() bool {
		var ok bool
		ids, ok = converged(1)
		return ok
	})
	h.Exec(data, "sh", "-c", "echo kept > /data/file")

	// Each iteration is one roster change with the agent killed at one point.
	type killPoint struct {
		name string
		// at blocks until the moment to kill; false: the moment never came
		// (the replacement finished first).
		at func(pushed time.Time) bool
	}
	watch := func(cond func([]fltObserved) bool) func(time.Time) bool {
		return func(time.Time) bool {
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if rows, err := fltPS(h); err == nil && cond(rows) {
					return true
				}
				time.Sleep(20 * time.Millisecond)
			}
			return false
		}
	}
	after := func(d time.Duration) func(time.Time) bool {
		return func(pushed time.Time) bool { time.Sleep(time.Until(pushed.Add(d))); return true }
	}
	random := time.Duration(500+rand.IntN(2500)) * time.Millisecond // a replacement takes seconds here
	points := []killPoint{
		{"an old container is aside", watch(func(rows []fltObserved) bool {
			return slices.ContainsFunc(rows, func(r fltObserved) bool { return strings.HasSuffix(r.name, reconcile.AsideSuffix) })
		})},
		{"a new container exists next to its aside", watch(func(rows []fltObserved) bool {
			have := map[string]bool{}
			for _, r := range rows {
				have[r.name] = true
			}
			for _, n := range names {
				if have[n] && have[n+reconcile.AsideSuffix] {
					return true
				}
			}
			return false
		})},
		{"0ms after the push", after(0)},
		{fmt.Sprintf("a random %v after the push", random), after(random)},
	}
	for i, kp := range points {
		gen := i + 2
		prev := ids
		// A watcher records every ID seen under each declared name.
		seen := map[string]map[string]bool{}
		var seenMu sync.Mutex
		stopWatch := make(chan struct{})
		watchDone := make(chan struct{})
		go func() {
			defer close(watchDone)
			for {
				if rows, err := fltPS(h); err == nil {
					seenMu.Lock()
					for _, r := range rows {
						if seen[r.name] == nil {
							seen[r.name] = map[string]bool{}
						}
						seen[r.name][r.id] = true
					}
					seenMu.Unlock()
				}
				select {
				case <-stopWatch:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()

		if err := push(decl(gen)); err != nil {
			t.Fatalf("roster %d: %v", gen, err)
		}
		pushed := time.Now()
		hit := kp.at(pushed)
		agent.kill()
		t.Logf("roster %d: SIGKILL when %s (reached: %v, %v after the push)", gen, kp.name, hit, time.Since(pushed).Round(time.Millisecond))
		fmt.Fprintf(logs, "=== SIGKILL (roster %d, %s)\n", gen, kp.name)
		mark := len(logs.String())
		agent = start()
		// The controller pushes again after an agent restart; the same
		// generation twice is not a fault.
		if err := push(decl(gen)); err != nil {
			t.Fatalf("roster %d after the restart: %v", gen, err)
		}
		eventually(t, fmt.Sprintf("roster %d converges after the restart", gen), 60*time.Second, func() bool {
			var ok bool
			ids, ok = converged(gen)
			return ok
		})
		t.Logf("roster %d: after the restart: %s", gen, fltActions(logs.String()[mark:], h.Prefix()))
		// A few more passes: nothing is replaced again.
		time.Sleep(2500 * time.Millisecond)
		again, ok := converged(gen)
		close(stopWatch)
		<-watchDone
		if !ok || !maps.Equal(again, ids) {
			t.Fatalf("roster %d: the machine moved after converging: %v -> %v", gen, ids, again)
		}
		seenMu.Lock()
		for _, n := range names {
			if ids[n] == prev[n] {
				t.Errorf("roster %d: %s was not replaced (copy mode carries the roster in its hosts)", gen, n)
			}
			for id := range seen[n] {
				if id != prev[n] && id != ids[n] {
					t.Errorf("roster %d: %s was replaced more than once: ID %.12s seen besides %.12s (before) and %.12s (after)", gen, n, id, prev[n], ids[n])
				}
			}
		}
		for name := range seen {
			if !slices.Contains(names, name) && !slices.Contains(names, strings.TrimSuffix(name, reconcile.AsideSuffix)) {
				t.Errorf("roster %d: unexpected container %s", gen, name)
			}
		}
		seenMu.Unlock()
		if agent.exited() {
			t.Fatalf("roster %d: the agent exited", gen)
		}
		if got := h.Exec(data, "cat", "/data/file"); got != "kept\n" {
			t.Fatalf("roster %d: the volume's file reads %q, want %q", gen, got, "kept\n")
		}
		if t.Failed() {
			return
		}
	}
	if strings.Contains(logs.String(), "/nonexistent") && !strings.Contains(logs.String(), "cannot probe") {
		t.Error("the missing probe binary was not reported as 'cannot probe'")
	}
}

// fltInProcess runs `meshhost agent` in this process (like
// TestAgentEndToEnd) until the test ends or stop is called, and returns its
// logs, a channel closed when it returns, and stop (which waits for that).
func fltInProcess(t *testing.T, args ...string) (logs *syncbuf.Buffer, done <-chan struct{}, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncbuf.Buffer{}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		env := &environment{stdout: logs, stderr: logs, getenv: func(string) string { return "" }}
		code := run(ctx, env, append([]string{"agent"}, args...))
		fmt.Fprintf(logs, "=== agent returned %d\n", code)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-finished:
			case <-time.After(30 * time.Second):
				t.Error("the agent did not stop within 30s")
			}
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	return logs, finished, stop
}

// fltDecl is a copy-mode declaration of busybox containers named names,
// with roster generation gen.
func fltDecl(machine string, gen int, names ...string) string {
	d := decltest.Declaration(uint64(gen)).Machine(machine).Flag(spec.FlagOff)
	d.Name("alpha.internal", "10.1.1.1")
	for i := 1; i <= gen; i++ {
		d.Name(fmt.Sprintf("n%d.internal", i), fmt.Sprintf("10.2.0.%d", i))
	}
	for _, n := range names {
		d.Container(decltest.App{Name: n, Image: podmantest.Image, Command: []string{"sh", "-c", `trap "exit 0" TERM; sleep 600 & wait`}, StopTimeout: "5s"})
	}
	return d.String()
}

// fltRunningIDs returns name -> ID of the test's running containers, and
// false when anything else (a stopped one, one aside) is there.
func fltRunningIDs(h *podmantest.Harness) (map[string]string, bool) {
	rows, err := fltPS(h)
	if err != nil {
		return nil, false
	}
	ids := map[string]string{}
	clean := true
	for _, r := range rows {
		if r.state != "running" || strings.HasSuffix(r.name, reconcile.AsideSuffix) {
			clean = false
		}
		ids[r.name] = r.id
	}
	return ids, clean
}

// TestAgentDeclarationSourceUnreachable: the agent reads its declaration
// from a directory; once the containers run, the declaration file and then
// the whole directory disappear and the push socket goes away. The agent
// keeps running, its resolver keeps answering the roster, /healthz stays 200
// and the machine stays as it is (same container IDs, all running) over
// several passes.
func TestAgentDeclarationSourceUnreachable(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // its agent binds the default network's gateway
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	dir := filepath.Join(t.TempDir(), "declarations")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	machine := strings.TrimSuffix(h.Prefix(), "-")
	a, b := h.Name("a"), h.Name("b")
	writeAtomic(t, filepath.Join(dir, "gen-000002.json"), fltDecl(machine, 2, a, b))
	sock := filepath.Join(state, "push.sock")
	dnsAddr, httpAddr := dnstest.FreePort(t), dnstest.FreePort(t)
	args := []string{"--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
		"--state", state, "--declaration", dir, "--push", "unix:" + sock, "--http", httpAddr.String(),
		"--listen", dnsAddr.String(), "--interval", "1s", "--budget", "10", "--probe-binary", "/nonexistent",
		"--upstream", stub.String(), "--node-local", "169.254.53.99", "--loopback", e2eLoopback}
	logs, done, stop := fltInProcess(t, args...)

	var ids map[string]string
	eventually(t, "both containers run", 60*time.Second, func() bool {
		var clean bool
		ids, clean = fltRunningIDs(h)
		return clean && ids[a] != "" && ids[b] != "" && strings.Contains(logs.String(), `msg="declaration applied"`)
	})
	eventually(t, "/healthz answers 200", 10*time.Second, func() bool { code, _ := healthzOf(httpAddr); return code == http.StatusOK })

	// The source goes away: the file, then the directory, and the push
	// endpoint's socket.
	if err := os.Rename(filepath.Join(dir, "gen-000002.json"), filepath.Join(state, "moved-away.json")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the watcher sees an empty directory
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	// Retried for 10s, not fltPusher's 60s: with the socket file gone every
	// try fails, and a longer wait would only slow the test down.
	if err := fltPusherWithin(sock, 10*time.Second)(fltDecl(machine, 3, a)); err == nil {
		t.Fatal("a push reached the agent although its socket is gone")
	}
	mark := len(logs.String())

	// Several passes (every second) with the source gone; then the agent
	// restarts (a reboot, an upgrade) while it is still gone.
	for i := range 7 {
		if i == 4 {
			stop()
			if after := logs.String()[mark:]; strings.Contains(after, "reconcile action") || strings.Contains(after, "pass failed") {
				t.Errorf("with the source gone the agent acted or failed:\n%s", after)
			}
			logs, done, _ = fltInProcess(t, args...)
			mark = 0
			eventually(t, "the restarted agent serves again", 20*time.Second, func() bool {
				code, _ := healthzOf(httpAddr)
				return code == http.StatusOK && strings.Contains(logs.String(), `msg="declaration applied"`)
			})
		}
		time.Sleep(time.Second)
		select {
		case <-done:
			t.Fatalf("pass %d: the agent stopped with its declaration source gone:\n%s", i+1, logs.String())
		default:
		}
		// Each answer may take a few tries on a loaded machine; a pass
		// that failed shows in the log, checked below.
		for name, want := range map[string]string{"alpha.internal.": "10.1.1.1", "n2.internal.": "10.2.0.2"} {
			eventually(t, fmt.Sprintf("pass %d: %s resolves to %s", i+1, name, want), 10*time.Second, func() bool {
				got := lookupWithin(dnsAddr, name, 3*time.Second)
				if got != want {
					t.Logf("pass %d: %s resolves to %q, want %s; trying again", i+1, name, got, want)
				}
				return got == want
			})
		}
		eventually(t, fmt.Sprintf("pass %d: /healthz answers 200", i+1), 10*time.Second, func() bool {
			code, body := healthzOf(httpAddr)
			if code != http.StatusOK {
				t.Logf("pass %d: /healthz: %d %s; trying again", i+1, code, body)
			}
			return code == http.StatusOK
		})
		if got, clean := fltRunningIDs(h); !clean || !maps.Equal(got, ids) {
			t.Fatalf("pass %d: the machine changed with the source gone: %v -> %v", i+1, ids, got)
		}
	}
	if after := logs.String()[mark:]; strings.Contains(after, "reconcile action") || strings.Contains(after, "pass failed") {
		t.Errorf("with the source gone the restarted agent acted or failed:\n%s", after)
	}
	if !strings.Contains(logs.String(), "declaration path unreachable") {
		t.Error("the restarted agent did not report its declaration path unreachable")
	}
}

// fltPodmanService starts a podman API service of this test's own with
// scripts/podman-up (MESHHOST_RUN_DIR pointing at a fresh directory; for
// podman 5, --podman 5 and MESHHOST_PODMAN5_RUN_DIR, which starts it in the
// namespace of the tests' podman 5 service) and returns its socket URI and
// its run directory. It shares the podman storage of the service the tests
// talk to, so the harness sees its containers; being the test's own,
// killing it breaks no other test. Cleanup stops it.
func fltPodmanService(t *testing.T) (socket, runDir string) {
	t.Helper()
	runDir, err := os.MkdirTemp("", "mhpodman-") // short: a socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fltStopPodman(t, runDir)
		os.RemoveAll(runDir)
	})
	return fltPodmanUp(t, runDir), runDir
}

// fltPodmanUp runs scripts/podman-up for runDir, which starts the service
// when it does not answer, and returns the socket URI it prints.
func fltPodmanUp(t *testing.T, runDir string) string {
	t.Helper()
	var args []string
	if v := podmantest.Version(t); v.Major >= 5 {
		args = []string{"--podman", strconv.Itoa(v.Major)}
	}
	cmd := exec.Command("../../scripts/podman-up", args...)
	cmd.Env = append(os.Environ(), "MESHHOST_RUN_DIR="+runDir, "MESHHOST_PODMAN5_RUN_DIR="+runDir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/podman-up: %v\n%s", err, stderr.String())
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export "+podmantest.EnvSocket+"="); ok {
			return v
		}
	}
	t.Fatalf("scripts/podman-up printed no %s:\n%s", podmantest.EnvSocket, out)
	return ""
}

// fltStopPodman kills the service whose pid scripts/podman-up wrote in
// runDir, after checking that the pid is that service, and waits until it
// is gone.
func fltStopPodman(t *testing.T, runDir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, "podman.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Errorf("podman.pid: %v", err)
		return
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), filepath.Join(runDir, "podman.sock")) {
		return // gone, or the pid is another process now
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for range 100 {
		if err := syscall.Kill(pid, 0); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("podman service %d did not die", pid)
}

// TestDisruptivePodmanRestart kills the podman API service the agent talks
// to in the middle of a pass (a roster change that replaces a container and
// a new container to create) and starts it again with scripts/podman-up.
// The passes during the outage fail with an error naming the socket, the
// agent keeps running and its resolver keeps answering, and once podman is
// back the next pass converges to the declaration.
//
// It runs a podman service of its own (see fltPodmanService), so it never
// kills the one other tests use; still, it restarts podman processes on a
// shared storage, so it runs only with MESHHOST_DISRUPTIVE=1, alone, after
// everything else (the Makefile's test target).
func TestDisruptivePodmanRestart(t *testing.T) {
	if os.Getenv("MESHHOST_DISRUPTIVE") != "1" {
		t.Skip("restarts the podman API service: runs only with MESHHOST_DISRUPTIVE=1, alone (make test runs it after everything else)")
	}
	h := podmantest.New(t)
	podmantest.Exclusive(t)
	socket, runDir := fltPodmanService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	sock := filepath.Join(state, "push.sock")
	machine := strings.TrimSuffix(h.Prefix(), "-")
	a, b := h.Name("a"), h.Name("b")
	dnsAddr := dnstest.FreePort(t)
	logs, done, _ := fltInProcess(t, "--runtime", "podman", "--podman", socket, "--machine", machine,
		"--state", state, "--push", "unix:"+sock, "--http", "off", "--listen", dnsAddr.String(),
		"--interval", "1s", "--budget", "10", "--probe-binary", "/nonexistent",
		"--upstream", stub.String(), "--node-local", "169.254.53.99", "--loopback", e2eLoopback)
	push := fltPusher(sock)
	if err := push(fltDecl(machine, 1, a)); err != nil {
		t.Fatal(err)
	}
	var ids map[string]string
	eventually(t, "the first container runs", 60*time.Second, func() bool {
		var clean bool
		ids, clean = fltRunningIDs(h)
		return clean && ids[a] != ""
	})

	// Generation 2 replaces a (its hosts change) and adds b; podman dies as
	// soon as the pass has begun.
	mark := len(logs.String())
	if err := push(fltDecl(machine, 2, a, b)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pass for generation 2 begins", 10*time.Second, func() bool {
		return strings.Contains(logs.String()[mark:], "roster in force")
	})
	fltStopPodman(t, runDir)
	down := time.Now()
	eventually(t, "a pass fails for want of podman", 20*time.Second, func() bool {
		return strings.Contains(logs.String()[mark:], "pass failed")
	})
	var failed string
	for _, line := range strings.Split(logs.String()[mark:], "\n") {
		if strings.Contains(line, "pass failed") {
			failed = line
			break
		}
	}
	t.Logf("podman down; the agent logged: %s", failed)
	if path := filepath.Join(runDir, "podman.sock"); !strings.Contains(failed, path) {
		t.Errorf("the failed pass's error does not name the socket %s: %s", path, failed)
	}
	for time.Since(down) < 3*time.Second { // a few passes while podman is down
		if got := lookupWithin(dnsAddr, "n2.internal.", 3*time.Second); got != "10.2.0.2" {
			t.Errorf("with podman down the resolver answers n2.internal with %q, want 10.2.0.2", got)
		}
		time.Sleep(500 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("the agent stopped while podman was down")
	default:
	}

	fltPodmanUp(t, runDir)
	eventually(t, "generation 2 converges once podman is back", 60*time.Second, func() bool {
		got, clean := fltRunningIDs(h)
		if !clean || got[a] == "" || got[b] == "" || len(got) != 2 {
			return false
		}
		hosts, _ := h.Podman("inspect", "--format", "{{.HostConfig.ExtraHosts}}", a, b)
		return strings.Count(hosts, "n2.internal:10.2.0.2") == 2
	})
	if got, _ := fltRunningIDs(h); got[a] == ids[a] {
		t.Errorf("%s was not replaced for generation 2", a)
	}
	if got := lookupWithin(dnsAddr, "alpha.internal.", 3*time.Second); got != "10.1.1.1" {
		t.Errorf("after the restart the resolver answers alpha.internal with %q", got)
	}
}

// fltManyFiles is how many files the container of
// TestDisruptivePodmanDiesMidRemoval writes into its writable layer: enough
// that podman takes a tenth of a second or more to delete them.
const fltManyFiles = 20000

// TestDisruptivePodmanDiesMidRemoval: podman's API service dies while it
// removes the old container at the end of a replacement, after it marked
// the container "removing" and began deleting its storage. Podman (4.3 and
// 5 alike) then keeps the container "removing" for good, refusing to start,
// stop, rename or inspect it. Once podman is back, the agent finishes the
// removal and keeps the new container, which runs: it neither rolls back
// onto the half-removed one nor fails pass after pass.
//
// TestDisruptivePodmanRestart kills podman at a random moment of a pass;
// this one kills it exactly there: the old container holds many files, and
// the test kills the service the moment they start to disappear.
func TestDisruptivePodmanDiesMidRemoval(t *testing.T) {
	if os.Getenv("MESHHOST_DISRUPTIVE") != "1" {
		t.Skip("kills a podman API service in the middle of a removal: runs only with MESHHOST_DISRUPTIVE=1, alone (make test runs it after everything else)")
	}
	h := podmantest.New(t)
	podmantest.Exclusive(t)
	socket, runDir := fltPodmanService(t)
	state := t.TempDir()
	sock := filepath.Join(state, "push.sock")
	machine := strings.TrimSuffix(h.Prefix(), "-")
	a := h.Name("a")
	logs, _, _ := fltInProcess(t, "--runtime", "podman", "--podman", socket, "--machine", machine,
		"--state", state, "--push", "unix:"+sock, "--http", "off", "--listen", dnstest.FreePort(t).String(),
		"--interval", "1s", "--budget", "10", "--probe-binary", "/nonexistent",
		"--node-local", "169.254.53.99", "--loopback", e2eLoopback)
	decl := func(gen int) string {
		script := fmt.Sprintf(`mkdir /many; i=0; while [ $i -lt %d ]; do : > /many/$i; i=$((i+1)); done; echo written; trap "exit 0" TERM; sleep 600 & wait`, fltManyFiles)
		return fmt.Sprintf(`{"schema": 1, "machine": %q, "generation": %d, "mesh_names": "off", "roster": %s, "containers": [{"name": %q, "image": %q, "command": ["sh", "-c", %q], "stop_timeout": "5s"}]}`,
			machine, gen, fltRoster(gen), a, podmantest.Image, script)
	}
	push := fltPusher(sock)
	if err := push(decl(1)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first container has written its files", 2*time.Minute, func() bool {
		out, _ := h.Podman("logs", a)
		return strings.Contains(out, "written")
	})
	old := h.MustPodman("inspect", "--format", "{{.Id}}", a)
	upper := h.MustPodman("inspect", "--format", "{{.GraphDriver.Data.UpperDir}}", a)
	pid, err := os.ReadFile(filepath.Join(runDir, "podman.pid"))
	if err != nil {
		t.Fatal(err)
	}
	// The layer as the service sees it (podman 5's lives in a mount
	// namespace of its own).
	many := filepath.Join("/proc", strings.TrimSpace(string(pid)), "root", upper, "many")
	if _, err := os.Stat(filepath.Join(many, "0")); err != nil {
		t.Fatalf("the container's files are not where podman says its layer is: %v", err)
	}

	// Generation 2 replaces a (its hosts change); its last step removes the
	// old container, and the service dies as soon as that has begun.
	mark := len(logs.String())
	if err := push(decl(2)); err != nil {
		t.Fatal(err)
	}
	sentinels := make([]string, 16)
	for i := range sentinels {
		sentinels[i] = filepath.Join(many, strconv.Itoa(i*fltManyFiles/len(sentinels)))
	}
	began := false
	for deadline := time.Now().Add(2 * time.Minute); !began && time.Now().Before(deadline); {
		for _, s := range sentinels {
			if _, err := os.Lstat(s); err != nil {
				began = true
				break
			}
		}
		if !began {
			time.Sleep(time.Millisecond)
		}
	}
	if !began {
		t.Fatalf("the old container's files were not removed within 2 minutes; the agent logged:\n%s", logs.String()[mark:])
	}
	fltStopPodman(t, runDir)
	var st string
	if rows, err := fltPS(h); err == nil {
		for _, r := range rows {
			if r.id == old {
				st = r.state
			}
		}
	}
	t.Logf("the service died while it removed the old container; podman now says it is %q", st)
	if st != "removing" {
		t.Fatalf("the old container is %q after the service died in its removal, want \"removing\": the test no longer makes the state it is about", st)
	}

	fltPodmanUp(t, runDir)
	var ids map[string]string
	eventually(t, "the agent converges once podman is back", time.Minute, func() bool {
		var clean bool
		ids, clean = fltRunningIDs(h)
		return clean && len(ids) == 1 && ids[a] != "" && ids[a] != old
	})
	after := logs.String()[mark:]
	if !strings.Contains(after, "was cut short") {
		t.Errorf("the agent did not say it finished a removal cut short:\n%s", after)
	}
	if strings.Contains(after, "kind=rollback") {
		t.Errorf("the agent rolled back onto the half-removed container:\n%s", after)
	}
	if replaced := strings.Count(after, "kind=replace reason="); replaced > 1 {
		t.Errorf("a was replaced %d times, want once:\n%s", replaced, after)
	}
	settled := len(logs.String())
	time.Sleep(3 * time.Second) // three passes
	if later := logs.String()[settled:]; strings.Contains(later, "pass failed") || strings.Contains(later, "reconcile action") {
		t.Errorf("after converging the agent still acts or fails:\n%s", later)
	}
	if got, clean := fltRunningIDs(h); !clean || !maps.Equal(got, ids) {
		t.Errorf("the machine changed after converging: %v -> %v", ids, got)
	}
}
