package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/testkit/continuity"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/fakesystemd"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

var (
	buildMu sync.Mutex
	builds  = map[string]string{}
)

// buildResolver builds this binary stamped with version, once per test
// process.
func buildResolver(t *testing.T, version string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := builds[version]; ok {
		return bin
	}
	dir, err := os.MkdirTemp("", "meshhost-resolver-build")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "meshhost-resolver")
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/meshhost/meshhost/internal/plumbing/buildinfo.version="+version, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	builds[version] = bin
	return bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, bin := range builds {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// proc is one resolver process.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	exited chan error
}

func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, stderr: new(syncbuf.Buffer), exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("resolver pid %d log:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

// waitServing waits for the "serving on" line.
func (p *proc) waitServing(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), ": serving on") {
		select {
		case err := <-p.exited:
			p.exited <- err // for the cleanup
			t.Fatalf("resolver exited (%v) before serving:\n%s", err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("resolver not serving within 30 s:\n%s", p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *proc) waitExit(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
		p.exited <- nil // for the cleanup
	case <-time.After(within):
		t.Fatalf("resolver pid %d still running after %v:\n%s", p.cmd.Process.Pid, within, p.stderr.String())
	}
}

func meshRoster(gen uint64) *spec.Roster {
	return &spec.Roster{
		Generation: gen,
		Zones:      []string{"internal"},
		Names:      map[string][]netip.Addr{"gitea.novox.internal": {netip.MustParseAddr("10.89.0.7")}},
	}
}

// fleet is probers asking each address, two each, ten times a second with
// a one-second timeout: a container's stub resolver's view.
type fleet []*continuity.Prober

func startFleet(addrs ...netip.AddrPort) fleet {
	var f fleet
	for _, a := range addrs {
		for i := range 2 {
			f = append(f, continuity.Start(fmt.Sprintf("%s#%d", a, i), 100*time.Millisecond, time.Second,
				continuity.UDP(a, "gitea.novox.internal", netip.MustParseAddr("10.89.0.7"))))
		}
	}
	return f
}

func (f fleet) stop() {
	for _, p := range f {
		p.Stop()
	}
}

func (f fleet) window(event string, from, to time.Time) continuity.Row {
	var sts []continuity.Stats
	for _, p := range f {
		sts = append(sts, p.Window(from, to))
	}
	return continuity.Row{Event: event, Stats: continuity.Sum(event, sts...)}
}

// TestContinuity replaces, kills and restarts the resolver service under
// steady lookups, as systemd and an operator would, and asserts that not
// one lookup fails: a handover to a new build (the predecessor still
// running), a SIGKILL and a restart (SIGTERM) with the sockets kept in
// systemd's file descriptor store, and a reboot (nothing kept but the
// state directory). The upstream never answers, and a question forwarded
// to it is in flight at the handover and at the restart: the process
// going away must not wait for it while nobody reads the sockets.
// MESHHOST_CONTINUITY_TABLE names a file that receives the table of
// results (scripts/bench-continuity prints it).
func TestContinuity(t *testing.T) {
	v1, v2 := buildResolver(t, "v1"), buildResolver(t, "v2")
	dir := t.TempDir()
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}) // reads, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	static, exposed := dnstest.FreePort(t), dnstest.FreePort(t)
	args := []string{
		"--state-dir", filepath.Join(dir, "state"), "--control", filepath.Join(dir, "control.sock"),
		"--handover", filepath.Join(dir, "handover.sock"), "--listen", static.String(),
		// Longer than any wait of this test: a forward stays in flight.
		"--upstream", silent.LocalAddr().String(), "--upstream-timeout", "1m",
	}
	pending := 0
	// forwardPending asks an outside name, and returns once the resolver
	// has forwarded it to the silent upstream.
	forwardPending := func() {
		t.Helper()
		pending++
		label := fmt.Sprintf("pending-%d", pending)
		go continuity.UDP(static, label+".example.org", netip.MustParseAddr("192.0.2.1"))(t.Context())
		silent.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 1500)
		for {
			n, _, err := silent.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("%s.example.org was not forwarded to the upstream: %v", label, err)
			}
			if bytes.Contains(buf[:n], append([]byte(label), "\x07example"...)) {
				return
			}
		}
	}
	// promptly fails unless the process going away exited within a bound
	// far under the forward's timeout (a minute) and the drains' (5 and
	// 10 s): with nobody reading the sockets meanwhile, or holding the
	// metrics port the successor binds, it exits in about 100 ms.
	promptly := func(event string, since time.Time) {
		t.Helper()
		took := time.Since(since)
		if took > 3*time.Second {
			t.Errorf("%s: the old process exited %v later, with a forward in flight; want it within 3 s", event, took.Round(time.Millisecond))
		}
		t.Logf("%s: the old process exited %v later, with a forward in flight", event, took.Round(time.Millisecond))
	}
	sd := fakesystemd.New(t)
	env := []string{"WATCHDOG_USEC=2000000"}
	p := startProc(t, sd.Command(v1, env, args...))
	_, ready := sd.Wait(0, "READY=1", 30*time.Second)
	c := control.NewClient(control.ClientConfig{Path: filepath.Join(dir, "control.sock")})
	if err := c.Update(meshRoster(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Listen(exposed); err != nil {
		t.Fatal(err)
	}
	wantStored := []string{"control", "dns-tcp-" + strings.ReplaceAll(exposed.String(), ":", "_"), "dns-tcp-" + strings.ReplaceAll(static.String(), ":", "_"),
		"dns-udp-" + strings.ReplaceAll(exposed.String(), ":", "_"), "dns-udp-" + strings.ReplaceAll(static.String(), ":", "_"), "handover"}
	waitStored(t, sd, wantStored)
	_ = ready

	f := startFleet(static, exposed)
	defer f.stop()
	var rows []continuity.Row
	settle := 1500 * time.Millisecond // lookups after the event, and a timeout's margin
	// event runs do and asserts that no lookup failed from a second
	// before it (or from what do returns, when not zero) to settle after.
	event := func(name string, do func() time.Time) {
		t.Helper()
		time.Sleep(settle)
		from := time.Now().Add(-time.Second)
		if start := do(); !start.IsZero() {
			from = start
		}
		time.Sleep(settle)
		to := time.Now()
		time.Sleep(1100 * time.Millisecond) // every lookup sent has ended
		row := f.window(name, from, to)
		rows = append(rows, row)
		if row.Failed > 0 || row.Lookups < 20 {
			t.Errorf("%s: %d of %d lookups failed (want 0 of at least 20): %v", name, row.Failed, row.Lookups, row.Errors)
		}
	}

	event("resolver upgrade (handover, new build)", func() time.Time {
		forwardPending()
		next := startProc(t, exec.Command(v2, args...)) // beside the old one, as an operator would
		next.waitServing(t)
		serving := time.Now()
		p.waitExit(t, 30*time.Second)
		promptly("handover", serving)
		p = next
		return time.Time{}
	})
	checkStatus(t, c, "v2", []netip.AddrPort{static, exposed})
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitExit(t, 30*time.Second)
	// A reboot: nothing is kept but the state directory. Units start in
	// order, so containers (the probers) ask from READY=1 on; lookups
	// before it fail, and are not counted.
	sd.Clear()
	var first error
	event("reboot (state directory only), from READY=1", func() time.Time {
		n := len(sd.Messages())
		p = startProc(t, sd.Command(v1, env, args...))
		_, ready := sd.Wait(n, "READY=1", 30*time.Second)
		for _, a := range []netip.AddrPort{static, exposed} {
			if err := continuity.UDP(a, "gitea.novox.internal", netip.MustParseAddr("10.89.0.7"))(t.Context()); err != nil && first == nil {
				first = fmt.Errorf("first lookup at %s after READY: %w", a, err)
			}
		}
		return ready.At
	})
	if first != nil {
		t.Error(first)
	}
	waitStored(t, sd, wantStored)

	event("resolver SIGKILL, restarted (fd store)", func() time.Time {
		n := len(sd.Messages())
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.waitExit(t, 10*time.Second)
		p = startProc(t, sd.Command(v1, env, args...))
		sd.Wait(n, "READY=1", 30*time.Second)
		return time.Time{}
	})
	event("resolver restart to a new build (SIGTERM, fd store)", func() time.Time {
		forwardPending()
		n := len(sd.Messages())
		term := time.Now()
		p.cmd.Process.Signal(syscall.SIGTERM)
		sd.Wait(n, "STOPPING=1", 10*time.Second)
		p.waitExit(t, 30*time.Second)
		promptly("restart", term)
		p = startProc(t, sd.Command(v2, env, args...))
		sd.Wait(n, "READY=1", 30*time.Second)
		return time.Time{}
	})
	checkStatus(t, c, "v2", []netip.AddrPort{static, exposed})

	// An address no longer exposed leaves systemd's store too.
	if err := c.Unlisten(exposed); err != nil {
		t.Fatal(err)
	}
	waitStored(t, sd, []string{"control", wantStored[2], wantStored[4], "handover"})

	table := continuity.Table(rows)
	t.Logf("\n%s", table)
	if path := os.Getenv("MESHHOST_CONTINUITY_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func waitStored(t *testing.T, sd *fakesystemd.Manager, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := sd.Stored()
		if strings.Join(got, " ") == strings.Join(want, " ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd's store holds %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkStatus(t *testing.T, c *control.Client, version string, listeners []netip.AddrPort) {
	t.Helper()
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(listeners, netip.AddrPort.Compare)
	if st.Version != version || st.Generation != 1 || fmt.Sprint(st.Listeners) != fmt.Sprint(listeners) {
		t.Errorf("status = version %s, generation %d, listeners %v; want %s, 1, %v", st.Version, st.Generation, st.Listeners, version, listeners)
	}
}

// bigRoster writes a roster of n names, generation gen, in the roster file
// format.
func bigRoster(n int, gen uint64) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"generation": %d, "zones": ["internal"], "names": {`, gen)
	for i := range n {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `"n%d.mesh.internal": ["10.%d.%d.%d"]`, i, 100+i>>16&0xff, i>>8&0xff, i&0xff)
	}
	b.WriteString("}}\n")
	return []byte(b.String())
}

// TestNotify: READY=1 comes only once the resolver answers (here, with a
// large saved roster to load first: the first lookup at READY gets its
// name), WATCHDOG=1 keeps coming while a large roster is swapped in over
// the control socket on one CPU, and STOPPING=1 comes on SIGTERM.
func TestNotify(t *testing.T) {
	bin := buildResolver(t, "v1")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "resolv.conf"), nil, 0o644)
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	const saved = 200_000
	if err := os.WriteFile(filepath.Join(dir, "state", "roster.json"), bigRoster(saved, 1), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := dnstest.FreePort(t)
	sd := fakesystemd.New(t)
	const watchdog = time.Second
	started := time.Now()
	p := startProc(t, sd.Command(bin, []string{"GOMAXPROCS=1", fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds())},
		"--state-dir", filepath.Join(dir, "state"), "--control", filepath.Join(dir, "control.sock"),
		"--listen", addr.String(), "--resolv-conf", filepath.Join(dir, "resolv.conf")))
	_, ready := sd.Wait(0, "READY=1", 60*time.Second)
	r, err := dnstest.Exchange(dns.NewMsg(fmt.Sprintf("n%d.mesh.internal.", saved-1), dns.TypeA), "udp", addr.String(), time.Second)
	if err != nil {
		t.Fatalf("lookup right after READY=1: %v", err)
	}
	last := saved - 1
	if err := continuity.CheckA(r, netip.AddrFrom4([4]byte{10, byte(100 + last>>16&0xff), byte(last >> 8 & 0xff), byte(last & 0xff)})); err != nil {
		t.Errorf("lookup right after READY=1: %v", err)
	}
	t.Logf("READY=1 %v after the process started, with %d saved names to load", ready.At.Sub(started), saved)

	// A swap long enough to span several watchdog intervals.
	c := control.NewClient(control.ClientConfig{Path: filepath.Join(dir, "control.sock"), Timeout: 30 * time.Second})
	var took time.Duration
	var from, to time.Time
	for n, gen := 400_000, uint64(2); ; n, gen = n*2, gen+1 {
		doc := bigRoster(n, gen)
		ro, err := specjson.ParseRoster(doc)
		if err != nil {
			t.Fatal(err)
		}
		from = time.Now()
		if err := c.Update(ro); err != nil {
			t.Fatalf("Update(%d names) = %v", n, err)
		}
		to = time.Now()
		took = to.Sub(from)
		if took >= 2*watchdog || n >= 1_600_000 {
			t.Logf("swap of %d names over the control socket took %v", n, took)
			break
		}
	}
	var pings []time.Time
	for _, m := range sd.Messages() {
		if m.Has("WATCHDOG=1") && !m.At.Before(from.Add(-watchdog)) && !m.At.After(to.Add(watchdog)) {
			pings = append(pings, m.At)
		}
	}
	var longest time.Duration
	for i := 1; i < len(pings); i++ {
		longest = max(longest, pings[i].Sub(pings[i-1]))
	}
	if want := int(took / watchdog); len(pings) < want || longest >= watchdog {
		t.Errorf("during a %v swap: %d WATCHDOG=1 (want at least %d), longest gap %v (want under the %v watchdog)", took, len(pings), want, longest, watchdog)
	}
	t.Logf("during a %v swap: %d WATCHDOG=1, longest gap %v", took, len(pings), longest)

	n := len(sd.Messages())
	p.cmd.Process.Signal(syscall.SIGTERM)
	sd.Wait(n, "STOPPING=1", 10*time.Second)
	p.waitExit(t, 30*time.Second)
}

// TestHUPWhileStarting: a SIGHUP while the resolver starts (here, held
// while it asks the handover socket for a predecessor's sockets, as it
// would be loading a large saved roster) neither kills it nor stops it:
// Go's default for SIGHUP is to exit, and `systemctl reload` or a
// logrotate can send one at any moment.
func TestHUPWhileStarting(t *testing.T) {
	bin := buildResolver(t, "v1")
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster", "roster.json")
	os.Mkdir(filepath.Dir(roster), 0o755)
	if err := os.WriteFile(roster, []byte(`{"generation": 1, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A predecessor that takes the connection and never answers.
	hpath := filepath.Join(dir, "handover.sock")
	hl, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: hpath, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	addr := dnstest.FreePort(t)
	sd := fakesystemd.New(t)
	p := startProc(t, sd.Command(bin, nil, "--roster", roster, "--listen", addr.String(), "--handover", hpath, "--upstream", "127.0.0.1:9"))
	hl.SetDeadline(time.Now().Add(30 * time.Second))
	c, err := hl.AcceptUnix()
	if err != nil {
		t.Fatalf("the resolver did not ask the handover socket: %v", err)
	}
	defer c.Close()
	// It runs, and has not served yet.
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("the resolver exited (%v) on a SIGHUP while starting:\n%s", err, p.stderr.String())
	case <-time.After(time.Second):
	}
	// No predecessor after all: it binds afresh, serves, and reloads.
	hl.Close()
	c.Close()
	sd.Wait(0, "READY=1", 30*time.Second)
	r, err := dnstest.Exchange(dns.NewMsg("gitea.novox.internal.", dns.TypeA), "udp", addr.String(), 2*time.Second)
	if err != nil {
		t.Fatalf("lookup after READY=1: %v", err)
	}
	if err := continuity.CheckA(r, netip.MustParseAddr("10.89.0.7")); err != nil {
		t.Errorf("lookup after READY=1: %v", err)
	}
	n := len(sd.Messages())
	p.cmd.Process.Signal(syscall.SIGTERM)
	sd.Wait(n, "STOPPING=1", 10*time.Second)
	p.waitExit(t, 30*time.Second)
}

// TestHandoverKeepsMetrics: a successor started with the predecessor's
// --metrics address (as the packaged unit runs both) takes over, and
// serves the metrics once the predecessor, which held the port, is gone:
// the port taken never aborts the takeover.
func TestHandoverKeepsMetrics(t *testing.T) {
	v1, v2 := buildResolver(t, "v1"), buildResolver(t, "v2")
	dir := t.TempDir()
	static, metrics := dnstest.FreePort(t), dnstest.FreePort(t)
	args := []string{
		"--state-dir", filepath.Join(dir, "state"), "--control", filepath.Join(dir, "control.sock"),
		"--handover", filepath.Join(dir, "handover.sock"), "--listen", static.String(),
		"--upstream", "127.0.0.1:9", "--metrics", metrics.String(),
	}
	// buildOf returns the version meshhost_build_info names, "" while
	// nobody serves the metrics.
	buildOf := func() string {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get("http://" + metrics.String() + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if rest, ok := strings.CutPrefix(line, "meshhost_build_info{"); ok {
				for _, kv := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(kv, `version="`); ok {
						return strings.TrimSuffix(strings.TrimSuffix(v, `"} 1`), `"`)
					}
				}
			}
		}
		return ""
	}
	waitBuild := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		got := buildOf()
		for got != want {
			if time.Now().After(deadline) {
				t.Fatalf("metrics on %s name build %q, want %q", metrics, got, want)
			}
			time.Sleep(50 * time.Millisecond)
			got = buildOf()
		}
	}
	p := startProc(t, exec.Command(v1, args...))
	p.waitServing(t)
	waitBuild("v1")
	c := control.NewClient(control.ClientConfig{Path: filepath.Join(dir, "control.sock")})
	if err := c.Update(meshRoster(1)); err != nil {
		t.Fatal(err)
	}

	next := startProc(t, exec.Command(v2, args...))
	next.waitServing(t)
	p.waitExit(t, 30*time.Second)
	waitBuild("v2")
	select {
	case err := <-next.exited:
		next.exited <- err
		t.Fatalf("the successor exited (%v):\n%s", err, next.stderr.String())
	default:
	}
	checkStatus(t, c, "v2", []netip.AddrPort{static})
}
