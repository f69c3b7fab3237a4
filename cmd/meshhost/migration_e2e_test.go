package main

import (
	"encoding/json"
	"errors"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/migrations"
)

// migNodeLocal is the node-local address the migration test assigns to lo
// for the DNS-enabled network's strategy, and migLoopback the aardvark
// strategy's address. Neither the production defaults nor the addresses of
// migrations' own tests, so neither is disturbed.
const (
	migNodeLocal = "169.254.53.78"
	migLoopback  = "127.53.0.78"
)

// TestMigrationEndToEnd is issue 5's point 4: the whole migration, on real
// podman, driven through the real agent (in-process) with containers on
// podman's default network (web), a DNS-enabled network (api, and its
// peer cache) and an internal network without DNS (db), with
// db <- api <- web as dependencies, on a machine that also has a network
// no declared container uses: an --internal network with aardvark-dns
// (unused), where no strategy can work, so its probe always fails:
//
//  1. Unreachable: the node-local address is not assigned, and the test
//     holds the aardvark strategy's loopback address (port 53), so the
//     DNS-enabled network (whose strategies are these two) cannot reach
//     the resolver and its probe fails. The flag is auto, so the gate stays
//     closed for the whole machine, even for the networks whose probes
//     passed: every container is created once, in copy mode, and several
//     passes replace nothing. The gate says the DNS-enabled network holds
//     it, and the unused network does not.
//  2. Reachable: the test lets go of the loopback address, the node-local
//     address is assigned to lo and the agent restarted on the same state
//     directory. The failed network is probed again and passes: through
//     aardvark-dns where it forwards to a container's --dns servers
//     (podman 4.4 and later), through the node-local address otherwise.
//     The machine switches, though the unused network still fails its
//     probe, and each container is replaced exactly once (counted from
//     podman's create events), dependencies started before their
//     dependants; further passes change nothing.
//  3. The crux: a name added to the roster after the containers were
//     created resolves inside a container on each network, a peer's
//     container name still resolves through aardvark-dns, a name outside
//     the mesh is forwarded, and the roster change replaces nothing.
//     Then a container declared onto the unused network (still failing)
//     is created in copy mode, the roster in its /etc/hosts, and nothing
//     else is replaced.
//  4. Flag off: each container is replaced exactly once more, into copy
//     mode, and /etc/hosts carries the roster again, the late name included.
func TestMigrationEndToEnd(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // the agent binds gateways and the node-local address
	if os.Geteuid() != 0 {
		// The agent binds port 53 on bridge gateways, and the test assigns
		// an address to lo.
		msg := "the migration test needs root (port 53 on bridge gateways, an address on lo)"
		needs.Missing(t, "%s", msg)
	}
	if nodeLocalAssigned(t) {
		// Only this test assigns it, and it holds the machine-wide lock: a
		// run killed before its cleanup left it.
		t.Logf("removing %s from lo, left by a killed run", migNodeLocal)
		if out, err := exec.Command("ip", "addr", "del", migNodeLocal+"/32", "dev", "lo").CombinedOutput(); err != nil {
			t.Fatalf("removing the leftover %s from lo: %v: %s", migNodeLocal, err, out)
		}
	}
	testStart := time.Now()
	ctx := t.Context()
	stub, err := startStubUpstream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	probe := buildMeshprobe(t, h)
	state := t.TempDir()
	machine := strings.TrimSuffix(h.Prefix(), "-")
	push := filepath.Join(state, "push.sock")
	agentArgs := []string{"--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
		"--state", state, "--push", "unix:" + push, "--http", "off", "--interval", "1s", "--budget", "100",
		"--upstream", stub.String(), "--probe-binary", probe,
		"--probe-outside", probeOutside + "=" + probeOutsideAddr.String(),
		"--node-local", migNodeLocal, "--loopback", migLoopback,
	}
	v := podmantest.Version(t)
	// Podman 4.4 and later keep aardvark-dns as a container's nameserver
	// given --dns, and make it forward to the given servers.
	dnsStrategy := migrations.StrategyNodeLocal
	if v.AtLeast(4, 4) {
		dnsStrategy = migrations.StrategyAardvark
	}

	dnsNet := h.Network("dns")
	// Podman 4.3 gives an internal network without DNS a gateway only when
	// asked, and the gateway strategy needs one.
	intNet := h.Network("int", "--internal", "--disable-dns", "--subnet", "10.213.78.0/24", "--gateway", "10.213.78.1")
	// No declared container uses it (until phase 3): it must not hold the
	// machine back.
	unusedNet := h.Network("unused", "--internal", "--subnet", "10.213.79.0/24", "--gateway", "10.213.79.1")
	db, api, cache, web := h.Name("db"), h.Name("api"), h.Name("cache"), h.Name("web")
	all := []string{db, api, cache, web}
	netOf := map[string]string{db: intNet, api: dnsNet, cache: dnsNet, web: "podman"}
	container := func(name string, nets []string, deps ...string) map[string]any {
		c := map[string]any{
			"name": name, "image": podmantest.Image,
			// sleep as PID 1 ignores SIGTERM: trap it, so a stop is quick.
			"command":      []string{"sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"},
			"stop_timeout": "2s",
		}
		if len(nets) > 0 {
			var ns []map[string]string
			for _, n := range nets {
				ns = append(ns, map[string]string{"name": n})
			}
			c["networks"] = ns
		}
		if len(deps) > 0 {
			c["depends_on"] = deps
		}
		return c
	}
	containers, _ := json.Marshal([]map[string]any{
		container(db, []string{intNet}),
		container(api, []string{dnsNet}, db),
		container(cache, []string{dnsNet}),
		container(web, nil, api), // podman's default network
	})
	declared := string(containers)
	roster := map[string]string{"alpha.internal": "10.1.1.1"}
	decl := func(gen int, flag string) string {
		return declDoc(machine, gen, flag, roster, declared)
	}

	// inspect returns each container's ID, whether it runs, when it started
	// and its DNS servers; a container that does not exist is missing.
	type info struct {
		id      string
		running bool
		started time.Time
		dns     string
	}
	inspect := func() map[string]info {
		out, _ := h.Podman(append([]string{"inspect", "--format",
			"{{.Name}}|{{.Id}}|{{.State.Running}}|{{.State.StartedAt.UnixNano}}|{{.HostConfig.Dns}}"}, all...)...)
		got := map[string]info{}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Split(line, "|")
			if len(f) != 5 {
				continue
			}
			ns, _ := strconv.ParseInt(f[3], 10, 64)
			got[f[0]] = info{id: f[1], running: f[2] == "true", started: time.Unix(0, ns), dns: strings.Trim(f[4], "[]")}
		}
		return got
	}
	// settled reports whether every container runs in the mode wanted.
	settled := func(resolve bool) func() bool {
		return func() bool {
			got := inspect()
			for _, n := range all {
				c, ok := got[n]
				if !ok || !c.running || (c.dns != "") != resolve {
					return false
				}
			}
			return true
		}
	}
	// creates counts podman's create events per container since a time.
	creates := func(since time.Time) map[string]int {
		t.Helper()
		return createEvents(t, h, since, all)
	}
	// passes waits for at least n more agent passes (one a second).
	passes := func(n int) { time.Sleep(time.Duration(n)*time.Second + 500*time.Millisecond) }
	each := func(n int) map[string]int {
		m := map[string]int{}
		for _, c := range all {
			m[c] = n
		}
		return m
	}
	hosts := func(c string) string {
		out, err := h.Podman("exec", c, "cat", "/etc/hosts")
		if err != nil {
			t.Errorf("reading %s's /etc/hosts: %v", c, err)
		}
		return out
	}
	nslookup := func(c, name string) string {
		out, _ := h.Podman("exec", c, "nslookup", name)
		return out
	}
	// resolves runs nslookup in c until its output contains want, for up to
	// 20s (a loaded machine may drop a try); it returns the last output.
	resolves := func(c, name, want string) (string, bool) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			out := nslookup(c, name)
			if strings.Contains(out, want) {
				return out, true
			}
			if time.Now().After(deadline) {
				return out, false
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	// 1. The DNS-enabled network cannot reach the resolver: the gate stays
	// closed, everything is created in copy mode, nothing is replaced.
	t.Log("phase 1: the node-local address is not assigned, the loopback address is taken")
	squatter := holdPort53(t, migLoopback)
	a1 := startAgent(t, "agent (resolver unreachable)", agentArgs...)
	pushDeclaration(t, push, decl(1, "auto"))
	eventually(t, "every container runs in copy mode", 90*time.Second, settled(false))
	var st *migrations.State
	eventually(t, "every network has been probed", 30*time.Second, func() bool {
		st, err = migrations.LoadState(statedir.New(state).Migrations())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"podman", dnsNet, intNet, unusedNet} {
			if ns := st.Networks[n]; ns == nil || ns.Last == nil {
				return false
			}
		}
		return true
	})
	for n, wantPass := range map[string]bool{"podman": true, intNet: true, dnsNet: false, unusedNet: false} {
		ns := st.Networks[n]
		t.Logf("probe of %s (%s): pass=%v strategy=%s reason=%s", n, ns.Kind, ns.Last.Pass, ns.Last.Strategy, ns.Last.Reason)
		if ns.Last.Pass != wantPass {
			t.Errorf("probe of %s: pass=%v, want %v (%s)", n, ns.Last.Pass, wantPass, ns.Last.Reason)
		}
		if n == dnsNet && !strings.Contains(ns.Last.Reason, "not assigned") {
			t.Errorf("probe of %s failed for %q, want the node-local strategy's reason: the address is not assigned", n, ns.Last.Reason)
		}
		if n == dnsNet && v.AtLeast(4, 4) && !strings.Contains(ns.Last.Reason, "address already in use") {
			t.Errorf("podman %s: probe of %s failed for %q, want the aardvark strategy's reason: its address is taken", v, n, ns.Last.Reason)
		}
		if ns.Resolve {
			t.Errorf("network %s switched to resolve mode while the DNS-enabled network cannot reach the resolver (flag auto)", n)
		}
	}
	if !st.AutoSwitchedAt.IsZero() {
		t.Errorf("the machine switched under auto at %v with a network failing", st.AutoSwitchedAt)
	}
	if k := st.Networks[unusedNet].Kind; k != migrations.KindInternalDNS {
		t.Errorf("network %s is of kind %s, want %s", unusedNet, k, migrations.KindInternalDNS)
	}
	// What holds the machine: the DNS-enabled network its containers use,
	// not the unused one (nor any other network the service has).
	if slices.Contains(st.Used, unusedNet) || !slices.Contains(st.Used, dnsNet) {
		t.Errorf("the gate records the networks used as %v, want %s among them and not %s", st.Used, dnsNet, unusedNet)
	}
	_, out, _ := runCLI(t, nil, "migrate", "status", "--state", state, "--podman", h.Socket())
	t.Logf("meshhost migrate status, the gate closed:\n%s", out)
	notWaiting := slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
		return strings.HasPrefix(l, "auto: not waiting for ") && strings.Contains(l, unusedNet)
	})
	if !strings.Contains(out, "waiting for "+dnsNet+"\n") || !notWaiting {
		t.Errorf("meshhost migrate status does not say the machine waits for %s only, not for %s:\n%s", dnsNet, unusedNet, out)
	}
	before := inspect()
	passes(4)
	for _, c := range all {
		if !strings.Contains(hosts(c), "10.1.1.1\talpha.internal") {
			t.Errorf("%s (network %s) has no copied roster in /etc/hosts while the gate is closed", c, netOf[c])
		}
	}
	if got := creates(testStart); !maps.Equal(got, each(1)) {
		t.Errorf("with the gate closed, containers created: %v, want each once", got)
	}
	if after := inspect(); !maps.Equal(after, before) || !settled(false)() {
		t.Errorf("with the gate closed, containers changed over several passes:\nbefore %v\nafter  %v", before, after)
	}
	if code := a1.stop(t); code != 0 {
		t.Fatalf("the first agent exited %d", code)
	}
	if t.Failed() {
		t.FailNow()
	}

	// 2. Reachable: the node-local address is assigned, the agent restarts
	// on the same state. The migration replaces each container once, in
	// dependency order.
	t.Log("phase 2: the loopback address is free, the node-local address assigned; the agent restarts")
	squatter.Close()
	addNodeLocal(t)
	phase2 := time.Now()
	startAgent(t, "agent (resolver reachable)", agentArgs...)
	// A failed network is probed again after the gate's retry delay (30s).
	eventually(t, "every container runs in resolve mode", 120*time.Second, settled(true))
	switched := inspect()
	passes(3)
	if got := creates(phase2); !maps.Equal(got, each(1)) {
		t.Errorf("the migration created %v, want each container exactly once", got)
	}
	for _, c := range all {
		if switched[c].id == before[c].id {
			t.Errorf("%s was not replaced by the migration", c)
		}
	}
	if after := inspect(); !maps.Equal(after, switched) {
		t.Errorf("containers changed after the migration converged:\nbefore %v\nafter  %v", switched, after)
	}
	for _, dep := range [][2]string{{db, api}, {api, web}} {
		if d, c := switched[dep[0]], switched[dep[1]]; !d.started.Before(c.started) {
			t.Errorf("%s (a dependency) started at %v, not before its dependant %s at %v", dep[0], d.started, dep[1], c.started)
		}
	}
	if st, err = migrations.LoadState(statedir.New(state).Migrations()); err != nil {
		t.Fatal(err)
	}
	if ns := st.Networks[unusedNet]; ns.Resolve || ns.Last == nil || ns.Last.Pass {
		t.Errorf("the unused network %s: resolve %v, last probe %+v; want copy mode and a failing probe", unusedNet, ns.Resolve, ns.Last)
	}
	if st.AutoSwitchedAt.IsZero() {
		t.Errorf("the machine did not switch under auto")
	}
	for n, want := range map[string]migrations.Strategy{"podman": migrations.StrategyGateway, dnsNet: dnsStrategy, intNet: migrations.StrategyGateway} {
		if ns := st.Networks[n]; !ns.Resolve {
			t.Errorf("network %s is not in resolve mode after the migration", n)
		} else {
			t.Logf("network %s: resolve mode through %s %v", n, ns.Proven.Strategy, ns.Proven.DNS.Servers)
			if ns.Proven.Strategy != want {
				t.Errorf("podman %s: network %s switched through %s, want %s", v, n, ns.Proven.Strategy, want)
			}
		}
	}
	// meshhost migrate status says which strategy each network got.
	code, out, stderr := runCLI(t, nil, "migrate", "status", "--state", state, "--podman", h.Socket())
	t.Logf("meshhost migrate status:\n%s", out)
	for _, row := range [][]string{{dnsNet, "resolve", string(dnsStrategy), "yes"}, {intNet, "resolve", "gateway", "yes"}, {unusedNet, "copy", "-", "no"}} {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			f := strings.Fields(l)
			return len(f) > 4 && f[0] == row[0] && f[2] == row[1] && f[3] == row[2] && f[4] == row[3]
		}) {
			t.Errorf("meshhost migrate status (exit %d, %s) has no row %v:\n%s", code, stderr, row, out)
		}
	}
	for _, c := range all {
		if strings.Contains(hosts(c), "alpha.internal") {
			t.Errorf("%s still has the copied roster in resolve mode", c)
		}
		if out, ok := resolves(c, "alpha.internal", "10.1.1.1"); !ok {
			t.Errorf("alpha.internal does not resolve in %s (network %s) in resolve mode:\n%s", c, netOf[c], out)
		}
	}

	// 3. The crux: a name added after the containers were created resolves
	// inside them, and the roster change replaces nothing.
	t.Log("phase 3: a name is added to the roster")
	phase3 := time.Now()
	roster["late.internal"] = "10.1.1.9"
	pushDeclaration(t, push, decl(2, "auto"))
	for _, c := range all {
		var last string
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(last, "10.1.1.9") {
			if time.Now().After(deadline) {
				resolv, _ := h.Podman("exec", c, "cat", "/etc/resolv.conf")
				t.Fatalf("late.internal does not resolve in %s (network %s) within 20s; nslookup says:\n%s\nresolv.conf:\n%s", c, netOf[c], last, resolv)
			}
			last = nslookup(c, "late.internal")
		}
	}
	cacheIP := h.MustPodman("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", cache)
	if out, ok := resolves(api, cache, cacheIP); !ok {
		t.Errorf("on the DNS-enabled network, the peer %s (%s) does not resolve in %s through aardvark-dns:\n%s", cache, cacheIP, api, out)
	}
	// A name outside the mesh: forwarded to the upstream (a stub on
	// loopback), from every network.
	for _, c := range all {
		if out, ok := resolves(c, probeOutside+".", probeOutsideAddr.String()); !ok {
			t.Errorf("the outside name %s does not resolve in %s (network %s):\n%s", probeOutside, c, netOf[c], out)
		}
	}
	passes(3)
	if got := creates(phase3); len(got) != 0 {
		t.Errorf("a roster change in resolve mode created containers: %v", got)
	}
	if after := inspect(); !maps.Equal(after, switched) {
		t.Errorf("a roster change in resolve mode changed containers:\nbefore %v\nafter  %v", switched, after)
	}

	// A container declared onto the unused network, which still fails its
	// probe: copy mode, and nothing else replaced.
	t.Log("phase 3b: a container is declared onto the network no container used")
	phase3b := time.Now()
	late := h.Name("late")
	var withLate []map[string]any
	if err := json.Unmarshal(containers, &withLate); err != nil {
		t.Fatal(err)
	}
	withLate = append(withLate, container(late, []string{unusedNet}))
	lateJSON, _ := json.Marshal(withLate)
	declared = string(lateJSON)
	pushDeclaration(t, push, decl(3, "auto"))
	eventually(t, "the container on the unused network runs", 60*time.Second, func() bool {
		out, err := h.Podman("inspect", "--format", "{{.State.Running}}", late)
		return err == nil && strings.TrimSpace(out) == "true"
	})
	if dns := h.MustPodman("inspect", "--format", "{{.HostConfig.Dns}}", late); strings.Trim(strings.TrimSpace(dns), "[]") != "" {
		t.Errorf("%s, on a network whose probe fails, was created with DNS servers %s, want copy mode", late, dns)
	}
	if hs := hosts(late); !strings.Contains(hs, "10.1.1.9\tlate.internal") {
		t.Errorf("%s, on a network whose probe fails, has no copied roster:\n%s", late, hs)
	}
	passes(2)
	if got := creates(phase3b); len(got) != 0 {
		t.Errorf("declaring a container onto the unused network created %v among the others", got)
	}
	if after := inspect(); !maps.Equal(after, switched) {
		t.Errorf("declaring a container onto the unused network changed the others:\nbefore %v\nafter  %v", switched, after)
	}
	if st, err = migrations.LoadState(statedir.New(state).Migrations()); err != nil {
		t.Fatal(err)
	}
	if st.AutoSwitchedAt.IsZero() || st.Networks[unusedNet].Resolve || !slices.Contains(st.Used, unusedNet) {
		t.Errorf("after declaring %s onto %s: switched at %v, %s in resolve mode %v, used %v; want still switched, it in copy mode and used",
			late, unusedNet, st.AutoSwitchedAt, unusedNet, st.Networks[unusedNet].Resolve, st.Used)
	}

	// 4. Flag off is the rollback: each container is replaced once more,
	// into copy mode, with the current roster in its hosts.
	t.Log("phase 4: the flag goes off")
	phase4 := time.Now()
	pushDeclaration(t, push, decl(4, "off"))
	eventually(t, "every container runs in copy mode again", 90*time.Second, settled(false))
	back := inspect()
	passes(3)
	if got := creates(phase4); !maps.Equal(got, each(1)) {
		t.Errorf("the rollback created %v, want each container exactly once", got)
	}
	if after := inspect(); !maps.Equal(after, back) {
		t.Errorf("containers changed after the rollback converged:\nbefore %v\nafter  %v", back, after)
	}
	for _, dep := range [][2]string{{db, api}, {api, web}} {
		if d, c := back[dep[0]], back[dep[1]]; !d.started.Before(c.started) {
			t.Errorf("rollback: %s started at %v, not before its dependant %s at %v", dep[0], d.started, dep[1], c.started)
		}
	}
	for _, c := range all {
		if back[c].id == switched[c].id {
			t.Errorf("%s was not replaced by the rollback", c)
		}
		hs := hosts(c)
		for _, want := range []string{"10.1.1.1\talpha.internal", "10.1.1.9\tlate.internal"} {
			if !strings.Contains(hs, want) {
				t.Errorf("%s's /etc/hosts after the rollback lacks %q:\n%s", c, want, hs)
			}
		}
	}
	t.Logf("the migration and back took %v", time.Since(testStart).Round(time.Second))
}

// holdPort53 binds UDP and TCP port 53 on the loopback address addr until
// it is closed or the test ends, so that a resolver cannot listen there.
func holdPort53(t *testing.T, addr string) io.Closer {
	t.Helper()
	ap := netip.AddrPortFrom(netip.MustParseAddr(addr), 53)
	u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		t.Fatalf("holding %s/udp: %v", ap, err)
	}
	l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		u.Close()
		t.Fatalf("holding %s/tcp: %v", ap, err)
	}
	c := closers{u, l}
	t.Cleanup(func() { c.Close() })
	return c
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nodeLocalAssigned reports whether migNodeLocal is an address of lo.
func nodeLocalAssigned(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("ip", "-o", "addr", "show", "dev", "lo").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr show dev lo: %v: %s", err, out)
	}
	return strings.Contains(string(out), " "+migNodeLocal+"/")
}

// addNodeLocal assigns migNodeLocal to lo until the test ends.
func addNodeLocal(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("ip", "addr", "add", migNodeLocal+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("adding the node-local address %s to lo (needs root): %v: %s", migNodeLocal, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "addr", "del", migNodeLocal+"/32", "dev", "lo").CombinedOutput(); err != nil {
			t.Errorf("removing %s from lo: %v: %s", migNodeLocal, err, out)
		}
	})
}
