package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/spec"
)

// TestLoadRosterChanges is issue 16's end-to-end figure, through the real
// agent loop (Run) and the real push endpoint (HTTP on a unix socket), on
// 2,000 containers in resolve mode (in memory) and 100,000 roster names:
// for a roster change pushed as a delta, and as a whole declaration that
// differs by the same one name, the time from the push's arrival to the
// resolver answering the new name over UDP (p50, p99, max), the process's
// CPU time and the bytes allocated per change (the agent's pass over the
// containers that each change starts, the HTTP client and the UDP poller
// included: they run in this process; the documents are built before),
// and, with a steady query load on the resolver while the changes arrive,
// the queries lost or answered wrongly. It takes minutes, so it runs only with
// MESHHOST_LOAD=1 (scripts/bench-load).
func TestLoadRosterChanges(t *testing.T) {
	if os.Getenv("MESHHOST_LOAD") == "" {
		t.Skip("set MESHHOST_LOAD=1 to run (scripts/bench-load)")
	}
	deltas, wholes, qps := envInt("MESHHOST_LOAD_DELTAS", 300), envInt("MESHHOST_LOAD_WHOLE", 10), envInt("MESHHOST_LOAD_QPS", 5000)
	const containers, names = 2000, 100000
	// With a journal, as the agent runs: every change is journalled too.
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, true, func(c *Config) { c.Journal = j })
	addr := netip.MustParseAddrPort("127.0.0.1:0")
	if err := f.srv.Listen(addr); err != nil {
		t.Fatal(err)
	}
	dnsAddr := f.srv.Listeners()[0]
	sock := filepath.Join(t.TempDir(), "push.sock")
	ln, err := declsource.Listen("unix:"+sock, declsource.Access{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: f.source.Handler()}
	go hs.Serve(ln)
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	push := func(doc []byte) {
		req, _ := http.NewRequest(http.MethodPut, "http://meshhost/v1/declaration", strings.NewReader(string(doc)))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("push: HTTP %d", resp.StatusCode)
		}
	}

	start := time.Now()
	push(declaration(1, spec.FlagOn, containers, names))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- f.agent.Run(ctx) }()
	defer func() {
		cancel()
		<-ran
	}()
	poller := newPoller(t, dnsAddr)
	if !poller.waitFor("svc7.node7.internal.", "10.64.0.7", time.Minute) {
		t.Fatal("the first roster was never served")
	}
	for f.agent.LastReport() == nil || len(f.agent.LastReport().Modes) != containers {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("deployed %d containers with %d names: %s", containers, names, time.Since(start).Round(time.Millisecond))
	before := ids(f.rt)

	gen := uint64(1)
	type result struct {
		lat        []time.Duration
		cpu        time.Duration
		alloc      uint64
		lost, sent uint64
		wrong      uint64
	}
	// run pushes n changes, each adding one name, built off the clock by
	// doc, and returns the figures; with load, queries run meanwhile.
	run := func(n int, load bool, doc func(gen uint64) []byte) result {
		var res result
		docs := make([][]byte, n) // built before: only the change is measured
		for i := range docs {
			docs[i] = doc(gen + uint64(i) + 1)
		}
		var lg *loadGen
		if load {
			lg = startLoad(t, dnsAddr, qps, names)
		}
		runtime.GC()
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		cpu0 := processCPU(t)
		for _, d := range docs {
			gen++
			name := fmt.Sprintf("moved%d.internal.", gen)
			want := fmt.Sprintf("10.200.%d.%d", gen>>8&255, gen&255)
			t0 := time.Now()
			push(d)
			if !poller.waitFor(name, want, 30*time.Second) {
				t.Fatalf("%s never answered", name)
			}
			res.lat = append(res.lat, time.Since(t0))
		}
		// The pass each change started (over the containers) is part of
		// its cost: wait for the last one.
		for f.agent.LastReport() == nil || f.agent.LastReport().Generation != gen {
			time.Sleep(time.Millisecond)
		}
		res.cpu = processCPU(t) - cpu0
		runtime.ReadMemStats(&ms1)
		res.alloc = ms1.TotalAlloc - ms0.TotalAlloc
		if lg != nil {
			res.sent, res.lost, res.wrong = lg.stop()
		}
		return res
	}
	rosterGen := uint64(1)
	deltaDoc := func(g uint64) []byte {
		rosterGen++
		return fmt.Appendf(nil, `{"schema": 1, "machine": "ace", "generation": %d, "roster_delta": {"from": %d, "generation": %d,
		  "set": {"moved%d.internal": ["10.200.%d.%d"]}}}`, g, rosterGen-1, rosterGen, g, g>>8&255, g&255)
	}
	var extra []string // the names the deltas added, for the whole declarations
	wholeDoc := func(g uint64) []byte {
		rosterGen++
		doc := declarationWithRoster(g, rosterGen, containers, names, extra)
		return doc
	}
	report := func(what string, n int, r result) {
		slices.Sort(r.lat)
		p := func(q float64) time.Duration { return r.lat[min(len(r.lat)-1, int(q*float64(len(r.lat))))] }
		line := fmt.Sprintf("%s, %d changes at %d names: arrival -> answered p50 %s p99 %s max %s; CPU %s/change; %s allocated/change",
			what, n, names, p(0.5).Round(time.Microsecond), p(0.99).Round(time.Microsecond), r.lat[len(r.lat)-1].Round(time.Microsecond),
			(r.cpu / time.Duration(n)).Round(time.Microsecond), bytesText(r.alloc/uint64(n)))
		if r.sent > 0 {
			line += fmt.Sprintf("; under %d qps: %d queries, %d lost, %d wrong", qps, r.sent, r.lost, r.wrong)
		}
		t.Log(line)
		if r.lost+r.wrong > 0 {
			t.Errorf("%s: %d queries lost and %d answered wrongly during the swaps, want 0", what, r.lost, r.wrong)
		}
	}
	note := func(from uint64, n int) {
		for g := from + 1; g <= from+uint64(n); g++ {
			extra = append(extra, fmt.Sprintf(`"moved%d.internal": ["10.200.%d.%d"]`, g, g>>8&255, g&255))
		}
	}

	g0 := gen
	report("delta push", deltas, run(deltas, false, deltaDoc))
	note(g0, deltas)
	g0 = gen
	report("delta push under load", deltas, run(deltas, true, deltaDoc))
	note(g0, deltas)
	// A whole declaration carries every name added so far, plus its own.
	wholeWithNew := func(g uint64) []byte {
		extra = append(extra, fmt.Sprintf(`"moved%d.internal": ["10.200.%d.%d"]`, g, g>>8&255, g&255))
		return wholeDoc(g)
	}
	report("whole push (one name differs)", wholes, run(wholes, false, wholeWithNew))
	report("whole push under load", wholes, run(wholes, true, wholeWithNew))

	if n := replaced(before, ids(f.rt)); n != 0 {
		t.Errorf("%d containers replaced by roster changes in resolve mode, want 0", n)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap in use at the end %d MB, VmHWM %s", ms.HeapInuse>>20, vmHWM())
}

// declarationWithRoster is declaration's document with roster generation
// rosterGen and the extra names (JSON members) besides the n generated.
func declarationWithRoster(gen, rosterGen uint64, containers, names int, extra []string) []byte {
	doc := string(declaration(gen, spec.FlagOn, containers, names))
	doc = strings.Replace(doc, fmt.Sprintf(`"roster": {"generation": %d,`, gen), fmt.Sprintf(`"roster": {"generation": %d,`, rosterGen), 1)
	if len(extra) > 0 {
		doc = strings.Replace(doc, `"names": {`, `"names": {`+strings.Join(extra, ",")+",", 1)
	}
	return []byte(doc)
}

func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		fmt.Sscan(s, &def)
	}
	return def
}

func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// query is a plain A query for name, with id.
func query(id uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, 0, 1, 0, 1)
}

// answerA returns the first A address of a reply to id, "" for none.
func answerA(b []byte, id uint16) (string, bool) {
	if len(b) < 12 || binary.BigEndian.Uint16(b) != id {
		return "", false
	}
	if b[3]&0x0F != 0 || binary.BigEndian.Uint16(b[6:]) == 0 || len(b) < 16 {
		return "", true
	}
	a := b[len(b)-4:]
	return netip.AddrFrom4([4]byte(a)).String(), true
}

// poller asks the resolver for one name until it answers as wanted.
type poller struct {
	t    *testing.T
	conn net.Conn
	id   uint16
}

func newPoller(t *testing.T, addr netip.AddrPort) *poller {
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &poller{t: t, conn: c}
}

func (p *poller) waitFor(name, want string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	buf := make([]byte, 512)
	for time.Now().Before(deadline) {
		p.id++
		p.conn.SetDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := p.conn.Write(query(p.id, name)); err != nil {
			p.t.Fatal(err)
		}
		for {
			n, err := p.conn.Read(buf)
			if err != nil {
				break
			}
			if got, ok := answerA(buf[:n], p.id); ok {
				if got == want {
					return true
				}
				break
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	return false
}

// loadGen asks for existing names at a steady rate and counts the answers
// that never came (lost) or were not the name's address (wrong).
type loadGen struct {
	stopc             chan struct{}
	wg                sync.WaitGroup
	sent, lost, wrong atomic.Uint64
}

func startLoad(t *testing.T, addr netip.AddrPort, qps, names int) *loadGen {
	const workers = 4
	lg := &loadGen{stopc: make(chan struct{})}
	interval := time.Second * workers / time.Duration(qps)
	for w := range workers {
		c, err := net.Dial("udp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		lg.wg.Add(1)
		go func() {
			defer lg.wg.Done()
			defer c.Close()
			buf := make([]byte, 512)
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for i := w; ; i += workers {
				select {
				case <-lg.stopc:
					return
				case <-tick.C:
				}
				n := (i * 7919) % names
				id := uint16(i)
				lg.sent.Add(1)
				c.SetDeadline(time.Now().Add(time.Second))
				if _, err := c.Write(query(id, fmt.Sprintf("svc%d.node%d.internal.", n, n%50))); err != nil {
					lg.lost.Add(1)
					continue
				}
				want := fmt.Sprintf("10.%d.%d.%d", 64+n/65536, n/256%256, n%256)
				for {
					m, err := c.Read(buf)
					if err != nil {
						lg.lost.Add(1)
						break
					}
					if got, ok := answerA(buf[:m], id); ok {
						if got != want {
							lg.wrong.Add(1)
						}
						break
					}
				}
			}
		}()
	}
	return lg
}

func (lg *loadGen) stop() (sent, lost, wrong uint64) {
	close(lg.stopc)
	lg.wg.Wait()
	return lg.sent.Load(), lg.lost.Load(), lg.wrong.Load()
}
