package main

import (
	"context"
	"fmt"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshhost/meshhost/internal/natssource"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// natsURL is the NATS server scripts/nats-up started; a test needing it
// skips without it outside CI, and fails under CI.
func natsURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("MESHHOST_NATS_URL")
	if url == "" {
		needs.Missing(t, `MESHHOST_NATS_URL is not set; run eval "$(scripts/nats-up)" first`)
	}
	return url
}

// publishCmd runs `meshhost publish args...` in-process.
func publishCmd(t *testing.T, args ...string) string {
	t.Helper()
	var out syncbuf.Buffer
	env := &environment{stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	if code := run(context.Background(), env, append([]string{"publish"}, args...)); code != 0 {
		t.Fatalf("meshhost publish %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
	}
	return out.String()
}

// gate forwards TCP to a server until closed; reopened on the same port.
type gate struct {
	addr, target string

	// mu guards the fields below.
	mu    sync.Mutex
	l     net.Listener
	conns []net.Conn
}

func newGate(t *testing.T, target string) *gate {
	g := &gate{target: strings.TrimPrefix(target, "nats://")}
	g.open(t, "127.0.0.1:0")
	t.Cleanup(g.close)
	return g
}

func (g *gate) open(t *testing.T, addr string) {
	t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the port was ours a moment ago
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.l, g.addr = l, l.Addr().String()
	g.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", g.target)
			if err != nil {
				c.Close()
				continue
			}
			g.mu.Lock()
			g.conns = append(g.conns, c, s)
			g.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
}

// close cuts every connection and refuses new ones.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.l.Close()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// TestAgentNATSSource runs the agent (in-memory runtime) on a NATS
// JetStream source: `meshhost publish` writes a declaration and its
// roster, the resolver answers them, a roster change published alone
// reaches the resolver, and with the server unreachable past the agent's
// patience the resolver keeps answering the roster in force while
// /healthz says the source is unreachable; once it is back the agent
// catches up with what was published meanwhile. The journal holds each
// roster that moved alone: `meshhost history` lists it, and `meshhost
// roster diff` names the names that moved.
func TestAgentNATSSource(t *testing.T) {
	url := natsURL(t)
	prefix := fmt.Sprintf("cmdtest-%d", time.Now().UnixNano()%1e9)
	dir := t.TempDir()
	declPath := filepath.Join(dir, "decl.json")
	if err := os.WriteFile(declPath, []byte(declDoc("ace", 1, "off", map[string]string{"alpha.internal": "10.7.0.1"}, `[]`)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := publishCmd(t, "--nats", url, "--nats-buckets", prefix, "--declaration", declPath)
	if !strings.Contains(out, "roster generation 1 (was 0): 1 names, 1 set") || !strings.Contains(out, "declaration of ace: generation 1") {
		t.Errorf("publish said:\n%s", out)
	}
	t.Cleanup(func() { deleteBuckets(t, url, prefix) })
	// The same again, as JSON: its shape is golden.
	checkGolden(t, "publish.shape", jsonShape(t, publishCmd(t, "--nats", url, "--nats-buckets", prefix, "--declaration", declPath, "--output", "json")))

	g := newGate(t, url)
	dnsAddr, httpAddr := dnstest.FreePort(t), dnstest.FreePort(t)
	a := startAgent(t, "agent", "--runtime", "memory", "--machine", "ace", "--state", filepath.Join(dir, "state"), "--push", "off",
		"--http", httpAddr.String(), "--listen", dnsAddr.String(), "--interval", "200ms", "--upstream", "127.0.0.1:9",
		"--source", "nats://"+g.addr, "--nats-buckets", prefix, "--nats-patience", "2s")
	eventually(t, "alpha.internal answers from the NATS roster", 30*time.Second, func() bool {
		return lookup(dnsAddr, "alpha.internal.") == "10.7.0.1"
	})
	eventually(t, "healthy", 10*time.Second, func() bool { code, _ := healthzOf(httpAddr); return code == http.StatusOK })

	// The roster moves alone (a roster file, no declaration).
	rosterPath := filepath.Join(dir, "roster.json")
	os.WriteFile(rosterPath, []byte(`{"generation": 2, "zones": ["internal"], "names": {"alpha.internal": ["10.7.0.2"], "beta.internal": ["10.7.0.3"]}}`), 0o644)
	out = publishCmd(t, "--nats", url, "--nats-buckets", prefix, "--roster", rosterPath)
	if !strings.Contains(out, "2 names, 2 set, 0 removed") {
		t.Errorf("publish of generation 2 said:\n%s", out)
	}
	eventually(t, "generation 2 answers", 30*time.Second, func() bool {
		return lookup(dnsAddr, "alpha.internal.") == "10.7.0.2" && lookup(dnsAddr, "beta.internal.") == "10.7.0.3"
	})

	// The server becomes unreachable for longer than the patience.
	g.close()
	cut := time.Now()
	os.WriteFile(rosterPath, []byte(`{"generation": 3, "zones": ["internal"], "names": {"alpha.internal": ["10.7.0.4"], "beta.internal": ["10.7.0.3"]}}`), 0o644)
	publishCmd(t, "--nats", url, "--nats-buckets", prefix, "--roster", rosterPath) // straight to the server
	eventually(t, "/healthz says the source is unreachable", 30*time.Second, func() bool {
		code, body := healthzOf(httpAddr)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "unreachable")
	})
	if d := time.Since(cut); d < 2*time.Second {
		t.Errorf("/healthz failed %s after the cut, before the 2s patience ran out", d)
	}
	for range 20 { // the roster in force is served all along
		if got := lookup(dnsAddr, "alpha.internal."); got != "10.7.0.2" {
			t.Fatalf("alpha.internal = %q while the source is unreachable, want the roster in force's 10.7.0.2", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get("http://" + httpAddr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "meshhost_natssource_live 0") || !strings.Contains(string(metrics), "meshhost_natssource_roster_generation 2") {
		t.Errorf("metrics during the outage lack meshhost_natssource_live 0 and roster generation 2:\n%s", grepLines(string(metrics), "meshhost_natssource"))
	}

	g.open(t, g.addr)
	eventually(t, "generation 3 after the outage", 60*time.Second, func() bool {
		return lookup(dnsAddr, "alpha.internal.") == "10.7.0.4"
	})
	eventually(t, "healthy again", 30*time.Second, func() bool { code, _ := healthzOf(httpAddr); return code == http.StatusOK })
	state := filepath.Join(dir, "state")
	eventually(t, "roster 3 journalled", 30*time.Second, func() bool {
		code, _, _ := runCLI(t, nil, "roster", "diff", "2", "3", "--state", state)
		return code == 0
	})
	if code := a.stop(t); code != 0 {
		t.Errorf("agent exit %d", code)
	}
	for _, tc := range []struct{ a, b, want string }{
		{"1", "2", "+ beta.internal 10.7.0.3\n~ alpha.internal 10.7.0.1 -> 10.7.0.2\n"},
		{"2", "3", "~ alpha.internal 10.7.0.2 -> 10.7.0.4\n"},
		{"3", "1", "- beta.internal 10.7.0.3\n~ alpha.internal 10.7.0.4 -> 10.7.0.1\n"},
	} {
		if code, out, errOut := runCLI(t, nil, "roster", "diff", tc.a, tc.b, "--state", state); code != 0 || out != tc.want {
			t.Errorf("roster diff %s %s = exit %d:\n%s%s\nwant\n%s", tc.a, tc.b, code, out, errOut, tc.want)
		}
	}
	_, hist, _ := runCLI(t, nil, "history", "--state", state)
	for _, want := range []string{"declaration 1: roster 1,", "roster 2 (declaration 1); names +1 -0 ~1", "roster 3 (declaration 1); names +0 -0 ~1"} {
		if !strings.Contains(hist, want) {
			t.Errorf("history lacks %q:\n%s", want, hist)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// deleteBuckets removes the test's buckets.
func deleteBuckets(t *testing.T, url, prefix string) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Logf("removing the test's buckets: %v", err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := natssource.LayoutFor(prefix)
	js.DeleteKeyValue(ctx, l.Roster)
	js.DeleteKeyValue(ctx, l.Machines)
}
