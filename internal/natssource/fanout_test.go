package natssource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
	"golang.org/x/sync/errgroup"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/spec"
)

// TestFanout is scripts/bench-fanout's measurement, run only when
// MESHHOST_FANOUT=1: one NATS server, WATCHERS watchers running this
// package's Watcher (each with a connection of its own), and one real
// agent (MESHHOST_BIN, in-memory runtime) whose resolver answers on
// loopback; a roster of NAMES names; CHANGES changes of one name each.
// For each: the time until every watcher has applied it, until the
// agent's resolver answers it, and the bytes the server sent. Then the
// same change made by pushing the whole declaration over HTTP to WATCHERS
// push receivers, and to a real agent's push endpoint.
func TestFanout(t *testing.T) {
	if os.Getenv("MESHHOST_FANOUT") != "1" {
		t.Skip("a benchmark: scripts/bench-fanout runs it")
	}
	url := sharedURL(t)
	monitor := os.Getenv("MESHHOST_NATS_MONITOR") // http://127.0.0.1:PORT of the server's monitoring
	bin := os.Getenv("MESHHOST_BIN")
	if bin == "" || monitor == "" {
		t.Fatal("MESHHOST_BIN and MESHHOST_NATS_MONITOR are required (scripts/bench-fanout sets them)")
	}
	nWatchers, nNames, nChanges, nPushes := envInt("WATCHERS", 1000), envInt("NAMES", 100000), envInt("CHANGES", 20), envInt("PUSHES", 3)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	ctx := context.Background()

	// The roster.
	names := map[string][]netip.Addr{}
	for i := range nNames {
		names[fmt.Sprintf("svc%d.node%d.internal", i, i%50)] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
	}
	roster := &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: names}
	start := time.Now()
	res, err := p.PublishRoster(ctx, roster)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d names in %s (%d bytes of values)", nNames, time.Since(start).Round(time.Millisecond), res.Bytes)
	decl := &spec.Declaration{Schema: 1, Machine: "bench", Generation: 1, MeshNames: spec.FlagOff, Roster: roster}
	if _, err := p.PublishDeclaration(ctx, decl); err != nil {
		t.Fatal(err)
	}

	// The real agent, on the NATS source.
	agentDNS := dnstest.FreePort(t)
	agent := startAgentProcess(t, bin, "nats", "--runtime", "memory", "--machine", "bench", "--state", t.TempDir(), "--push", "off",
		"--http", "off", "--listen", agentDNS.String(), "--upstream", "127.0.0.1:9", "--interval", "1h",
		"--source", url, "--nats-buckets", strings.TrimSuffix(l.Roster, "-roster"))
	first := "svc0.node0.internal"
	start = time.Now()
	waitFor(t, 5*time.Minute, "the agent answers the roster", func() bool { return resolve(agentDNS, first) == "10.0.0.0" })
	t.Logf("agent: first roster answered %s after start", time.Since(start).Round(time.Millisecond))

	// The watchers: one reads the bucket whole; the others start from its
	// snapshot and resume after its revision, as an agent restarting from
	// saved state would, so the bench does not pay WATCHERS whole reads.
	applied := make([][]time.Time, nWatchers) // [watcher] -> time each generation was applied, by index gen-3
	for i := range applied {
		applied[i] = make([]time.Time, nChanges)
	}
	var appliedCount [1 << 10]atomic.Int64 // by generation-3; the last: the warm-up
	onChange := func(i int) func(*Change) {
		return func(ch *Change) {
			now := time.Now()
			if ch.Generation == 2 { // the warm-up
				appliedCount[len(appliedCount)-1].Add(1)
				return
			}
			g := int(ch.Generation) - 3
			if g >= 0 && g < nChanges {
				applied[i][g] = now
				appliedCount[g].Add(1)
			}
		}
	}
	ws := make([]*Watcher, nWatchers)
	ws[0] = startWatcher(t, Config{Server: Server{URL: url}, Layout: l, OnChange: onChange(0), Logger: quiet()})
	waitFor(t, 5*time.Minute, "watcher 0 reads the roster", func() bool { return ws[0].Generation() == 1 })
	seed := ws[0].Snapshot()
	start = time.Now()
	for i := 1; i < nWatchers; i++ {
		ws[i] = startWatcher(t, Config{Server: Server{URL: url}, Layout: l, OnChange: onChange(i), Seed: seed, Logger: quiet()})
	}
	waitFor(t, 5*time.Minute, "every watcher live", func() bool {
		for _, w := range ws {
			if !w.health.Load().down.IsZero() {
				return false
			}
		}
		return true
	})
	t.Logf("%d watchers live in %s", nWatchers, time.Since(start).Round(time.Millisecond))
	// One change before measuring: the server's first write after the
	// watchers' consumers were made took seconds (nats-server 2.9).
	start = time.Now()
	warm := fmt.Sprintf("svc%d.node0.internal", 50)
	if _, err := p.PublishDelta(ctx, Delta{Generation: 2, Set: map[string][]netip.Addr{warm: {netip.MustParseAddr("10.250.0.1")}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, "the warm-up change everywhere", func() bool {
		return appliedCount[len(appliedCount)-1].Load() == int64(nWatchers) && resolve(agentDNS, warm) == "10.250.0.1"
	})
	t.Logf("warm-up change (not measured): %s", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)

	// NATS: one name changes, CHANGES times.
	rng := rand.New(rand.NewPCG(1, 2))
	var allWatchers, agentAnswer, perWatcher []time.Duration
	var outBytes, inBytes, wireBytes []float64
	var publishTimes []time.Duration
	for c := range nChanges {
		gen := uint64(c + 3)
		name := fmt.Sprintf("svc%d.node0.internal", rng.IntN(nNames/50)*50)
		addr := netip.AddrFrom4([4]byte{10, 200, byte(c), byte(rng.IntN(250) + 1)})
		out0, in0 := varz(t, monitor)
		w0 := wchar(t)
		t0 := time.Now()
		if _, err := p.PublishDelta(ctx, Delta{Generation: gen, Set: map[string][]netip.Addr{name: {addr}}}); err != nil {
			t.Fatal(err)
		}
		published := time.Since(t0)
		publishTimes = append(publishTimes, published)
		agentDone := make(chan time.Duration, 1)
		go func() {
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				if resolve(agentDNS, name) == addr.String() {
					agentDone <- time.Since(t0)
					return
				}
				time.Sleep(time.Millisecond)
			}
			agentDone <- -1
		}()
		waitFor(t, 2*time.Minute, fmt.Sprintf("change %d applied by every watcher", c), func() bool { return appliedCount[c].Load() == int64(nWatchers) })
		var last time.Duration
		var these []time.Duration
		for i := range ws {
			d := applied[i][c].Sub(t0)
			these = append(these, d)
			last = max(last, d)
		}
		perWatcher = append(perWatcher, these...)
		if testing.Verbose() {
			t.Logf("change %d: published (committed) in %s; per watcher p10 %s p50 %s p90 %s", c, published.Round(time.Millisecond), pct(these, 10), pct(these, 50), pct(these, 90))
		}
		allWatchers = append(allWatchers, last)
		if testing.Verbose() {
			t.Logf("change %d (%s): every watcher %s", c, name, last.Round(time.Millisecond))
		}
		a := <-agentDone
		if a < 0 {
			t.Fatalf("change %d: the agent's resolver never answered %s = %s", c, name, addr)
		}
		agentAnswer = append(agentAnswer, a)
		time.Sleep(300 * time.Millisecond) // heartbeats aside, the change's traffic is over
		out1, in1 := varz(t, monitor)
		wireBytes = append(wireBytes, wchar(t)-w0)
		outBytes = append(outBytes, out1-out0)
		inBytes = append(inBytes, in1-in0)
		if c == nChanges-1 {
			if out, err := exec.Command("dig", "+short", "-p", strconv.Itoa(int(agentDNS.Port())), "@"+agentDNS.Addr().String(), name).Output(); err == nil {
				t.Logf("dig @%s %s: %s", agentDNS, name, strings.TrimSpace(string(out)))
			}
		}
	}
	t.Logf("NATS, %d watchers + 1 agent, %d names, %d one-name changes:", nWatchers, nNames, nChanges)
	t.Logf("  every watcher applied:  p50 %s  p99 %s  (per watcher: p50 %s p99 %s)", pct(allWatchers, 50), pct(allWatchers, 99), pct(perWatcher, 50), pct(perWatcher, 99))
	t.Logf("  the controller's PublishDelta (reads the commit and the name, writes both): p50 %s  p99 %s", pct(publishTimes, 50), pct(publishTimes, 99))
	t.Logf("  agent's resolver answers: p50 %s  p99 %s", pct(agentAnswer, 50), pct(agentAnswer, 99))
	t.Logf("  server sent per change: median %.0f bytes of messages (%.0f per watcher; the server's out_bytes), %.0f written in all (%.0f per watcher; its write calls: protocol, heartbeats and its store included); received %.0f",
		median(outBytes), median(outBytes)/float64(nWatchers+1), median(wireBytes), median(wireBytes)/float64(nWatchers+1), median(inBytes))
	agent.stop(t)

	// Push: the same change as a whole declaration PUT to every machine.
	doc, err := decl.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the whole declaration: %d bytes", len(doc))
	pushDNS := dnstest.FreePort(t)
	sock := filepath.Join(t.TempDir(), "push.sock")
	pushAgent := startAgentProcess(t, bin, "push", "--runtime", "memory", "--machine", "bench", "--state", t.TempDir(), "--push", "unix:"+sock,
		"--http", "off", "--listen", pushDNS.String(), "--upstream", "127.0.0.1:9", "--interval", "1h")
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	put := func(doc []byte) {
		waitFor(t, time.Minute, "push accepted", func() bool {
			resp, err := client.Do(mustRequest(doc))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	put(doc)
	waitFor(t, 5*time.Minute, "the push agent answers", func() bool { return resolve(pushDNS, first) == "10.0.0.0" })

	recv := newReceivers(t, nWatchers)
	defer recv.close()
	var pushAll, pushAgent1, pushPer []time.Duration
	var pushBytes []float64
	for c := range nPushes {
		d := *decl
		d.Generation = uint64(c + 2)
		r := *roster
		r.Generation = d.Generation
		r.Names = maps.Clone(names)
		name := fmt.Sprintf("svc%d.node0.internal", 50*(c+1))
		addr := netip.AddrFrom4([4]byte{10, 201, byte(c), 1})
		r.Names[name] = []netip.Addr{addr}
		d.Roster = &r
		doc, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// One machine with a real agent: its own time to apply.
		t0 := time.Now()
		put(doc)
		waitFor(t, 2*time.Minute, "the push agent answers the change", func() bool { return resolve(pushDNS, name) == addr.String() })
		agentApply := time.Since(t0)
		pushAgent1 = append(pushAgent1, agentApply)
		// WATCHERS machines: the controller pushes the document to each,
		// 64 at a time; a machine has applied it when the document has
		// arrived, plus what applying it costs the real agent.
		b0 := recv.bytes.Load()
		t0 = time.Now()
		arrivals := recv.push(t, doc, 64)
		pushBytes = append(pushBytes, float64(recv.bytes.Load()-b0))
		var last time.Duration
		for _, a := range arrivals {
			d := a.Sub(t0) + agentApply
			pushPer = append(pushPer, d)
			last = max(last, d)
		}
		pushAll = append(pushAll, last)
	}
	t.Logf("push, %d machines (HTTP PUT of the whole declaration, 64 at a time), %d names, %d one-name changes:", nWatchers, nNames, nPushes)
	t.Logf("  one real agent, PUT to resolver answering: p50 %s", pct(pushAgent1, 50))
	t.Logf("  every machine applied (arrival + that):  p50 %s  p99 %s  (per machine: p50 %s p99 %s)", pct(pushAll, 50), pct(pushAll, 99), pct(pushPer, 50), pct(pushPer, 99))
	t.Logf("  bytes sent per change: median %.0f (%.0f per machine)", median(pushBytes), median(pushBytes)/float64(nWatchers))
	t.Logf("ratio push/NATS (medians): every-machine time %.0fx, bytes %.0fx (against all the server wrote)", float64(pct(pushAll, 50))/float64(pct(allWatchers, 50)), median(pushBytes)/median(wireBytes))
	pushAgent.stop(t)
}

func mustRequest(doc []byte) *http.Request {
	req, _ := http.NewRequest(http.MethodPut, "http://agent/v1/declaration", bytes.NewReader(doc))
	return req
}

// receivers are push endpoints that read a whole declaration and note
// when it arrived, counting the bytes that reached them.
type receivers struct {
	addrs  []string
	srvs   []*http.Server
	bytes  atomic.Int64
	mu     sync.Mutex
	arrive map[string]time.Time
}

func newReceivers(t testing.TB, n int) *receivers {
	r := &receivers{arrive: map[string]time.Time{}}
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			n, _ := io.Copy(io.Discard, req.Body)
			r.bytes.Add(n + headerBytes(req))
			r.mu.Lock()
			r.arrive[addr] = time.Now()
			r.mu.Unlock()
			w.WriteHeader(http.StatusOK)
		})}
		go srv.Serve(l)
		r.addrs = append(r.addrs, addr)
		r.srvs = append(r.srvs, srv)
	}
	return r
}

// headerBytes is the size of the request line and headers as sent.
func headerBytes(req *http.Request) int64 {
	n := len(req.Method) + len(req.URL.RequestURI()) + len(req.Proto) + 4
	for k, vs := range req.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n + len(req.Host) + 8)
}

func (r *receivers) push(t testing.TB, doc []byte, parallel int) []time.Time {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	var g errgroup.Group
	g.SetLimit(parallel)
	for _, addr := range r.addrs {
		g.Go(func() error {
			resp, err := client.Post("http://"+addr+"/v1/declaration", "application/json", bytes.NewReader(doc))
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Time, 0, len(r.addrs))
	for _, a := range r.addrs {
		out = append(out, r.arrive[a])
	}
	return out
}

func (r *receivers) close() {
	for _, s := range r.srvs {
		s.Close()
	}
}

// agentProcess is a meshhost agent run as its own process.
type agentProcess struct {
	cmd  *exec.Cmd
	logs *bytes.Buffer
}

func startAgentProcess(t testing.TB, bin, name string, args ...string) *agentProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"agent", "--log-level", "warn"}, args...)...)
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProcess{cmd: cmd, logs: logs}
	t.Cleanup(func() {
		a.stop(t)
		if t.Failed() {
			t.Logf("%s agent log:\n%s", name, logs.String())
		}
	})
	return a
}

func (a *agentProcess) stop(t testing.TB) {
	if a.cmd.Process == nil || a.cmd.ProcessState != nil {
		return
	}
	a.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		a.cmd.Process.Kill()
		<-done
	}
}

func resolve(server netip.AddrPort, name string) string {
	r, err := dnstest.Exchange(dns.NewMsg(name+".", dns.TypeA), "udp", server.String(), 200*time.Millisecond)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return ""
	}
	return r.Answer[0].(*dns.A).A.Addr.String()
}

// wchar returns the bytes the server process has written (to sockets and
// its store), from /proc/PID/io.
func wchar(t testing.TB) float64 {
	data, err := os.ReadFile("/proc/" + os.Getenv("MESHHOST_NATS_PID") + "/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	t.Fatal("no wchar in /proc/PID/io")
	return 0
}

// varz returns the server's total bytes sent and received.
func varz(t testing.TB, monitor string) (out, in float64) {
	resp, err := http.Get(monitor + "/varz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		OutBytes float64 `json:"out_bytes"`
		InBytes  float64 `json:"in_bytes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.OutBytes, v.InBytes
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)].Round(10 * time.Microsecond)
}

func median(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// quiet is the watchers' logger in the bench: errors only.
func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
