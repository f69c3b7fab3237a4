package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
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
