package natssource

import (
	"context"
	"fmt"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// needNATS skips a test that needs a real NATS server, outside CI only:
// under CI=true a missing server fails it (scripts/nats-up provides one).
func needNATS(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		needs.Missing(t, "%s is not set; run eval \"$(scripts/nats-up)\" first", env)
	}
	return v
}

// sharedURL is the server scripts/nats-up started; each test uses buckets
// of its own on it (testLayout).
func sharedURL(t testing.TB) string { return needNATS(t, "MESHHOST_NATS_URL") }

var nonBucket = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// testLayout returns buckets only this test uses, removed when it ends.
func testLayout(t testing.TB, url string) Layout {
	t.Helper()
	l := LayoutFor(fmt.Sprintf("t-%s-%d", nonBucket.ReplaceAllString(t.Name(), "_"), time.Now().UnixNano()%1e9))
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			return // the test's own server is gone with its store
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		js.DeleteKeyValue(ctx, l.Roster)
		js.DeleteKeyValue(ctx, l.Machines)
	})
	return l
}

// ownServer is a nats-server of the test's own, which it may kill and
// restart: same port, same store.
type ownServer struct {
	t     testing.TB
	bin   string
	dir   string
	port  int
	extra []string // more arguments
	// mu guards cmd: a test restarts the server from another goroutine.
	mu  sync.Mutex
	cmd *exec.Cmd
	// connect are the options a test client needs (TLS).
	connect []nats.Option
}

func startOwnServer(t testing.TB, extra ...string) *ownServer {
	t.Helper()
	s := &ownServer{t: t, bin: needNATS(t, "MESHHOST_NATS_SERVER"), dir: t.TempDir(), port: freePort(t), extra: extra}
	s.start()
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *ownServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *ownServer) start() {
	s.t.Helper()
	if err := s.startE(); err != nil {
		s.t.Fatal(err)
	}
}

// startE starts the server and waits until JetStream answers; it may run
// outside the test's goroutine.
func (s *ownServer) startE() error {
	cmd := exec.Command(s.bin, append([]string{"--jetstream", "--store_dir", filepath.Join(s.dir, "store"), "--addr", "127.0.0.1", "--port", fmt.Sprint(s.port)}, s.extra...)...)
	log, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	// The server dies with the test binary, even one killed by -timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %v", s.bin, err)
	}
	log.Close()
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(s.URL(), append([]nats.Option{nats.Timeout(time.Second)}, s.connect...)...)
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx) // JetStream is up, not only the server
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	data, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	return fmt.Errorf("nats-server on port %d did not come up; its log:\n%s", s.port, data)
}

// kill kills the server with SIGKILL, as a crash would.
func (s *ownServer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proxy stands between watchers and a server on loopback; cut makes it a
// black hole (connections stay open, nothing passes: a partition, not a
// refusal), heal lets traffic through again.
type proxy struct {
	l      net.Listener
	target string

	// mu guards the fields below.
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: strings.TrimPrefix(target, "nats://")}
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.closeAll()
	})
	return p
}

func (p *proxy) URL() string { return "nats://" + p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		cut := p.cut
		p.mu.Unlock()
		if cut {
			go io.Copy(io.Discard, c) // held open, never answered
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, s)
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies while the proxy is not cut, and drops what arrives while it is.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if !cut {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.mu.Unlock()
	if !cut {
		p.closeAll() // the black-holed connections end; clients reconnect
	}
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
