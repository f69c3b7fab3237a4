package main

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// TestNoPodmanClient keeps this binary free of the podman client: linking
// it is what made the resolver run alone a third larger in memory.
func TestNoPodmanClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "github.com/containers/") {
			t.Errorf("meshhost-resolver links %s; keep podman code out of internal/resolvercmd and what it imports", dep)
		}
	}
}

// TestServes builds the binary and asks it for a roster name over UDP: the
// command is `meshhost resolver` (tested in cmd/meshhost); this checks the
// binary wires it up.
func TestServes(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "meshhost-resolver")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	roster := filepath.Join(dir, "roster", "roster.json")
	os.Mkdir(filepath.Dir(roster), 0o755)
	if err := os.WriteFile(roster, []byte(`{"generation": 1, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := dnstest.FreePort(t).String()

	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--roster", roster, "--listen", addr, "--upstream", "127.0.0.1:9")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		m := dns.NewMsg("gitea.novox.internal.", dns.TypeA)
		r, err := dnstest.Exchange(m, "udp", addr, 500*time.Millisecond)
		if err == nil && len(r.Answer) == 1 {
			if a, ok := r.Answer[0].(*dns.A); !ok || a.A.Addr.String() != "10.89.0.7" {
				t.Fatalf("gitea.novox.internal = %v, want A 10.89.0.7", r.Answer[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from meshhost-resolver within 10 s (last error %v); its log:\n%s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFlushOnSIGUSR1: an outside name is asked upstream once, then answered
// from the cache, and asked upstream again after SIGUSR1 empties it.
func TestFlushOnSIGUSR1(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "meshhost-resolver")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	roster := filepath.Join(dir, "roster", "roster.json")
	os.Mkdir(filepath.Dir(roster), 0o755)
	if err := os.WriteFile(roster, []byte(`{"generation": 1, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A loopback upstream counting the questions it answers.
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var asked atomic.Int32
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			q := &dns.Msg{Data: append([]byte(nil), buf[:n]...)}
			if q.Unpack() != nil || len(q.Question) != 1 {
				continue
			}
			if q.Question[0].Header().Name == "outside.example.com." { // not the loop check's question
				asked.Add(1)
			}
			r := new(dns.Msg)
			r.ID, r.Response, r.RecursionDesired, r.Question = q.ID, true, q.RecursionDesired, q.Question
			r.Answer = []dns.RR{&dns.A{Hdr: dns.Header{Name: q.Question[0].Header().Name, Class: dns.ClassINET, TTL: 300}, A: rdata.A{Addr: netip.MustParseAddr("192.0.2.10")}}}
			if r.Pack() == nil {
				pc.WriteToUDPAddrPort(r.Data, from)
			}
		}
	}()
	addr := dnstest.FreePort(t).String()
	var stderr syncbuf.Buffer
	cmd := exec.Command(bin, "--roster", roster, "--listen", addr, "--upstream", pc.LocalAddr().String())
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	ask := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := dnstest.Exchange(dns.NewMsg("outside.example.com.", dns.TypeA), "udp", addr, time.Second)
			if err == nil && len(r.Answer) == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("outside.example.com: no answer within 10 s (last error %v); log:\n%s", err, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ask()
	ask()
	if n := asked.Load(); n != 1 {
		t.Fatalf("upstream asked %d times for two questions, want 1 (then the cache)", n)
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "cache flushed") {
		if time.Now().After(deadline) {
			t.Fatalf("no \"cache flushed\" in the log 10 s after SIGUSR1:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ask()
	if n := asked.Load(); n != 2 {
		t.Errorf("upstream asked %d times after SIGUSR1, want 2", n)
	}
}
