package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/continuity"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/fakesystemd"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/migrations"
)

// contNodeLocal is the node-local address the continuity test assigns to
// lo: neither the production default nor another test's.
const contNodeLocal = "169.254.53.79"

// contBuild builds a command of this module stamped with version, as
// make build stamps it (internal/plumbing/buildinfo).
func contBuild(t *testing.T, pkg, name, version string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/meshhost/meshhost/internal/plumbing/buildinfo.version="+version, pkg)
	cmd.Env = append(os.Environ(), "GOFLAGS="+fltTags, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s %s: %v\n%s", name, version, err, out)
	}
	return bin
}

// contProc is a process of the test (an agent or a resolver).
type contProc struct {
	name string
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
	done chan struct{}
}

func contStart(t *testing.T, name string, cmd *exec.Cmd) *contProc {
	t.Helper()
	p := &contProc{name: name, cmd: cmd, logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s (pid %d) log:\n%s", p.name, p.cmd.Process.Pid, p.logs.String())
		}
	})
	return p
}

func (p *contProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %s: %v", p.name, err)
	}
}

func (p *contProc) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s still runs %v after it was told to stop", p.name, within)
	}
}

func (p *contProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// contProber is the probers of one container: lookups from inside its
// network namespace to its own nameserver, ten a second each, one second
// timeout, as its stub resolver would send them.
type contProber struct {
	container string
	ns        *continuity.Netns
	probers   []*continuity.Prober
}

// nameserver reads the nameserver the container's resolver asks: the one
// line of its resolv.conf (aardvark-dns's address on a DNS-enabled network
// of podman 4.4 and later, which forwards to the resolver). A second line
// would be raced by musl, and waited for by glibc: the test fails on one.
func nameserver(t *testing.T, h *podmantest.Harness, c string) netip.Addr {
	t.Helper()
	conf := h.Exec(c, "cat", "/etc/resolv.conf")
	var servers []netip.Addr
	sc := bufio.NewScanner(strings.NewReader(conf))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				servers = append(servers, a)
			}
		}
	}
	switch len(servers) {
	case 0:
		t.Fatalf("%s has no nameserver:\n%s", c, conf)
	case 1:
	default:
		t.Errorf("%s has %d nameservers, want one (a second is no fallback):\n%s", c, len(servers), conf)
	}
	return servers[0]
}

func startContProber(t *testing.T, h *podmantest.Harness, c string, name string, want netip.Addr) *contProber {
	t.Helper()
	pid := strings.TrimSpace(h.MustPodman("inspect", "--format", "{{.State.Pid}}", c))
	ns, err := continuity.JoinNetns("/proc/" + pid + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	server := netip.AddrPortFrom(nameserver(t, h, c), 53)
	t.Logf("probing %s from %s's network namespace", server, c)
	cp := &contProber{container: c, ns: ns}
	for i := range 2 {
		cp.probers = append(cp.probers, continuity.Start(fmt.Sprintf("%s#%d", c, i), 100*time.Millisecond, time.Second, ns.UDP(server, name, want)))
	}
	return cp
}

func (cp *contProber) stop() {
	for _, p := range cp.probers {
		p.Stop()
	}
	cp.ns.Close()
}

// TestDisruptiveDNSContinuity is issue 12's measurement: two containers in
// resolve mode, one on podman's default network, one on a DNS-enabled
// network, each looking up a mesh name ten times a second from its own
// network namespace with a one-second timeout, while the agent and the
// resolver go through every event of their lives. Not one lookup may fail:
//
//   - the agent SIGKILLed and restarted a second later (systemd's Restart=);
//   - the agent stopped and a new build started (an upgrade);
//   - SIGHUP to the agent;
//   - podman's API service restarted;
//   - the agent started while podman's API is down, and stays down (a
//     minute under CI=true; MESHHOST_PODMAN_DOWN shortens it elsewhere);
//   - the resolver SIGKILLed and restarted, and restarted into a new
//     build, with its sockets in systemd's file descriptor store;
//   - the resolver upgraded by a new build started beside it (handover);
//   - a reboot: everything stopped, then started in unit order (resolver,
//     podman, containers, agent): each container's first lookup answers.
//
// The resolver and the agent run as processes of their own (the builds
// under test, stamped v1 and v2); the resolver under a stand-in for
// systemd (its notify socket and file descriptor store). podman's API is
// a service of the test's own over the shared storage, so restarting it
// never disturbs the shared one: hence a Disruptive test, run alone.
// MESHHOST_CONTINUITY_TABLE names a file that receives the table of
// results (scripts/bench-continuity prints it).
func TestDisruptiveDNSContinuity(t *testing.T) {
	if os.Getenv("MESHHOST_DISRUPTIVE") != "1" {
		t.Skip("restarts a podman API service and binds gateways' port 53: runs only with MESHHOST_DISRUPTIVE=1, alone (make test runs it after everything else)")
	}
	h := podmantest.New(t)
	podmantest.Exclusive(t)
	if os.Geteuid() != 0 {
		t.Fatal("the continuity test needs root (port 53 on a bridge gateway, an address on lo, joining containers' network namespaces)")
	}
	down := time.Minute
	if os.Getenv("CI") != "true" {
		down = 15 * time.Second
		if v := os.Getenv("MESHHOST_PODMAN_DOWN"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("MESHHOST_PODMAN_DOWN: %v", err)
			}
			down = d
		}
	}
	exec.Command("ip", "addr", "del", contNodeLocal+"/32", "dev", "lo").Run() // left by a killed run
	if out, err := exec.Command("ip", "addr", "add", contNodeLocal+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("assigning %s to lo: %v: %s", contNodeLocal, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "addr", "del", contNodeLocal+"/32", "dev", "lo").Run() })

	podmanSock, podmanRun := fltPodmanService(t)
	ctx := t.Context()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	probe := buildMeshprobe(t, h)
	agentV1 := contBuild(t, ".", "meshhost", "v1")
	agentV2 := contBuild(t, ".", "meshhost", "v2")
	resolverV1 := contBuild(t, "../meshhost-resolver", "meshhost-resolver", "v1")
	resolverV2 := contBuild(t, "../meshhost-resolver", "meshhost-resolver", "v2")

	run, err := os.MkdirTemp("", "mhcont-") // short: socket paths have a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	control := filepath.Join(run, "resolver.sock")
	resolverArgs := []string{"--state-dir", filepath.Join(run, "resolver"), "--control", control,
		"--handover", filepath.Join(run, "handover.sock"), "--upstream", stub.String()}
	sd := fakesystemd.New(t)
	sdEnv := []string{"WATCHDOG_USEC=30000000"}
	resolverProc := contStart(t, "resolver v1", sd.Command(resolverV1, sdEnv, resolverArgs...))
	sd.Wait(0, "READY=1", 60*time.Second)

	machine := strings.TrimSuffix(h.Prefix(), "-")
	agentState := filepath.Join(run, "agent")
	push := filepath.Join(agentState, "push.sock")
	httpAddr := dnstest.FreePort(t)
	agentArgs := []string{"agent", "--runtime", "podman", "--podman", podmanSock, "--machine", machine,
		"--state", agentState, "--push", "unix:" + push, "--http", httpAddr.String(),
		"--interval", "2s", "--budget", "100", "--resolver", "unix:" + control,
		"--probe-binary", probe, "--probe-outside", probeOutside + "=" + probeOutsideAddr.String(),
		"--node-local", contNodeLocal}
	agentProc := contStart(t, "agent v1", exec.Command(agentV1, agentArgs...))

	dnsNet := h.Network("dns")
	web, api := h.Name("web"), h.Name("api")
	containers := fmt.Sprintf(`[
	  {"name": %q, "image": %q, "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"], "stop_timeout": "2s"},
	  {"name": %q, "image": %q, "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"], "stop_timeout": "2s",
	   "networks": [{"name": %q}]}]`, web, podmantest.Image, api, podmantest.Image, dnsNet)
	pushDeclaration(t, push, declDoc(machine, 1, "on", map[string]string{"alpha.internal": "10.1.1.1"}, containers))
	// Each container runs in resolve mode with the DNS server its network's
	// proven strategy gives it (podman 4.3: the default network's gateway,
	// the node-local address on the DNS-enabled one; podman 4.4 and later
	// switch the DNS-enabled one through aardvark-dns to the loopback
	// address), and without the copied roster.
	netOf := map[string]string{web: "podman", api: dnsNet}
	var strategies []string
	resolveMode := func() bool {
		st, err := migrations.LoadState(statedir.New(agentState).Migrations())
		if err != nil {
			return false
		}
		strategies = strategies[:0]
		for _, c := range []string{web, api} {
			ns := st.Networks[netOf[c]]
			if ns == nil || !ns.Resolve || ns.Proven == nil || len(ns.Proven.DNS.Servers) == 0 {
				return false
			}
			out, err := h.Podman("inspect", "--format", "{{.State.Running}}|{{.HostConfig.Dns}}|{{.HostConfig.ExtraHosts}}", c)
			if err != nil || out != fmt.Sprintf("true|%v|[]", ns.Proven.DNS.Servers) {
				return false
			}
			strategies = append(strategies, fmt.Sprintf("%s on %s: %s %v", c, netOf[c], ns.Proven.Strategy, ns.Proven.DNS.Servers))
		}
		return true
	}
	eventually(t, "both containers run in resolve mode", 3*time.Minute, resolveMode)
	t.Logf("resolve mode: %s", strings.Join(strategies, "; "))
	eventually(t, "the agent is ready", time.Minute, func() bool { code, _ := probeOf(httpAddr, "/readyz"); return code == http.StatusOK })

	want := netip.MustParseAddr("10.1.1.1")
	var probers []*contProber
	startProbers := func() {
		probers = nil
		for _, c := range []string{web, api} {
			probers = append(probers, startContProber(t, h, c, "alpha.internal", want))
		}
	}
	stopProbers := func() {
		for _, cp := range probers {
			cp.stop()
		}
	}
	startProbers()
	defer func() { stopProbers() }()

	var rows []continuity.Row
	settle := 2 * time.Second
	window := func(event string, from, to time.Time) {
		t.Helper()
		time.Sleep(1100 * time.Millisecond) // every lookup sent has ended
		var sts []continuity.Stats
		for _, cp := range probers {
			for _, p := range cp.probers {
				sts = append(sts, p.Window(from, to))
			}
		}
		row := continuity.Row{Event: event, Stats: continuity.Sum(event, sts...)}
		rows = append(rows, row)
		if row.Failed > 0 || row.Lookups < 20 {
			t.Errorf("%s: %d of %d lookups failed (want 0 of at least 20): %v", event, row.Failed, row.Lookups, row.Errors)
		}
	}
	event := func(name string, do func()) {
		t.Helper()
		time.Sleep(settle)
		from := time.Now().Add(-time.Second)
		do()
		time.Sleep(settle)
		window(name, from, time.Now())
	}

	// The agent's events.
	event("agent SIGKILL, restarted 1 s later", func() {
		agentProc.signal(t, syscall.SIGKILL)
		agentProc.wait(t, 10*time.Second)
		time.Sleep(time.Second)
		agentProc = contStart(t, "agent v1 (restarted)", exec.Command(agentV1, agentArgs...))
		eventually(t, "the restarted agent is ready", time.Minute, func() bool { code, _ := probeOf(httpAddr, "/readyz"); return code == http.StatusOK })
	})
	event("agent stopped, new build started (upgrade)", func() {
		agentProc.signal(t, syscall.SIGTERM)
		agentProc.wait(t, 60*time.Second)
		agentProc = contStart(t, "agent v2", exec.Command(agentV2, agentArgs...))
		eventually(t, "the new agent is ready", time.Minute, func() bool { code, _ := probeOf(httpAddr, "/readyz"); return code == http.StatusOK })
		if !strings.Contains(agentProc.logs.String(), "version=v2") {
			t.Errorf("the upgraded agent does not say it is v2:\n%s", agentProc.logs.String())
		}
	})
	event("SIGHUP to the agent", func() {
		agentProc.signal(t, syscall.SIGHUP)
		eventually(t, "the agent logs the reload", 10*time.Second, func() bool { return strings.Contains(agentProc.logs.String(), "SIGHUP: reloading") })
		time.Sleep(time.Second)
		if !agentProc.running() {
			t.Fatal("the agent died of SIGHUP")
		}
	})
	event("podman API service restarted", func() {
		fltStopPodman(t, podmanRun)
		eventually(t, "a pass fails for want of podman", time.Minute, func() bool {
			code, _ := probeOf(httpAddr, "/readyz")
			return code == http.StatusServiceUnavailable
		})
		fltPodmanUp(t, podmanRun)
		eventually(t, "a pass succeeds after podman's restart", time.Minute, func() bool {
			code, _ := probeOf(httpAddr, "/readyz")
			return code == http.StatusOK
		})
	})
	event(fmt.Sprintf("agent started while podman's API is down (%v)", down), func() {
		agentProc.signal(t, syscall.SIGTERM)
		agentProc.wait(t, 60*time.Second)
		fltStopPodman(t, podmanRun)
		agentProc = contStart(t, "agent v2 (podman down)", exec.Command(agentV2, agentArgs...))
		deadline := time.Now().Add(down)
		for time.Now().Before(deadline) {
			if !agentProc.running() {
				t.Fatalf("the agent exited while podman's API was down")
			}
			if code, body := probeOf(httpAddr, "/livez"); code != 0 && code != http.StatusOK {
				t.Errorf("/livez with podman down = %d %s, want 200: the agent and its resolver are alive", code, body)
			}
			time.Sleep(time.Second)
		}
		if code, body := probeOf(httpAddr, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "podman") {
			t.Errorf("/readyz with podman down = %d %q, want 503 naming podman", code, body)
		}
		fltPodmanUp(t, podmanRun)
		eventually(t, "the agent is ready once podman is back", 2*time.Minute, func() bool { code, _ := probeOf(httpAddr, "/readyz"); return code == http.StatusOK })
	})

	// The resolver's events.
	event("resolver SIGKILL, restarted (fd store)", func() {
		n := len(sd.Messages())
		resolverProc.signal(t, syscall.SIGKILL)
		resolverProc.wait(t, 10*time.Second)
		resolverProc = contStart(t, "resolver v1 (restarted)", sd.Command(resolverV1, sdEnv, resolverArgs...))
		sd.Wait(n, "READY=1", 60*time.Second)
	})
	event("resolver restart into a new build (fd store)", func() {
		n := len(sd.Messages())
		resolverProc.signal(t, syscall.SIGTERM)
		resolverProc.wait(t, 30*time.Second)
		resolverProc = contStart(t, "resolver v2 (fd store)", sd.Command(resolverV2, sdEnv, resolverArgs...))
		sd.Wait(n, "READY=1", 60*time.Second)
	})
	event("resolver upgrade by handover (new build beside)", func() {
		next := contStart(t, "resolver v1 (handover)", exec.Command(resolverV1, resolverArgs...))
		resolverProc.wait(t, 60*time.Second) // the old one drains and exits
		resolverProc = next
		eventually(t, "the new resolver serves", 30*time.Second, func() bool { return strings.Contains(next.logs.String(), "serving on") })
	})

	// A reboot: everything stops; then, in unit order, the resolver (from
	// its state directory alone), podman, the containers, the agent.
	stopProbers()
	agentProc.signal(t, syscall.SIGTERM)
	agentProc.wait(t, 60*time.Second)
	resolverProc.signal(t, syscall.SIGTERM)
	resolverProc.wait(t, 30*time.Second)
	sd.Clear()
	h.MustPodman("stop", "-t", "2", web, api)
	fltStopPodman(t, podmanRun)
	n := len(sd.Messages())
	resolverProc = contStart(t, "resolver v2 (boot)", sd.Command(resolverV2, sdEnv, resolverArgs...))
	sd.Wait(n, "READY=1", 60*time.Second)
	fltPodmanUp(t, podmanRun)
	h.MustPodman("start", web, api)
	booted := time.Now()
	for _, c := range []string{web, api} {
		pid := strings.TrimSpace(h.MustPodman("inspect", "--format", "{{.State.Pid}}", c))
		ns, err := continuity.JoinNetns("/proc/" + pid + "/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		server := netip.AddrPortFrom(nameserver(t, h, c), 53)
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		err = ns.UDP(server, "alpha.internal", want)(lctx)
		cancel()
		ns.Close()
		if err != nil {
			t.Errorf("reboot: %s's first lookup of alpha.internal: %v", c, err)
		}
	}
	startProbers()
	agentProc = contStart(t, "agent v2 (boot)", exec.Command(agentV2, agentArgs...))
	eventually(t, "the agent is ready after the reboot", 2*time.Minute, func() bool { code, _ := probeOf(httpAddr, "/readyz"); return code == http.StatusOK })
	time.Sleep(settle)
	window("reboot, from the containers' start", booted, time.Now())

	table := continuity.Table(rows)
	t.Logf("\n%s", table)
	if path := os.Getenv("MESHHOST_CONTINUITY_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// probeOf GETs path of the agent's HTTP endpoint: the status code (0 when
// nothing answered) and the trimmed body.
func probeOf(addr netip.AddrPort, path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr.String() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, strings.TrimSpace(b.String())
}
