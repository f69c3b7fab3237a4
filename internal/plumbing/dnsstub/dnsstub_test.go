package dnsstub

import (
	"context"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestWithDig asks the stub with a real DNS client.
func TestWithDig(t *testing.T) {
	dig := needs.Tool(t, "dig", "bind9-dnsutils")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Start(ctx, "outside.example.test", netip.MustParseAddr("192.0.2.53"))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(name, qtype string) string {
		out, _ := exec.Command(dig, "@"+addr.Addr().String(), "-p", strconv.Itoa(int(addr.Port())), "+tries=1", "+time=2", name, qtype).CombinedOutput()
		return string(out)
	}
	if out := ask("Outside.Example.Test", "A"); !strings.Contains(out, "192.0.2.53") || !strings.Contains(out, "status: NOERROR") {
		t.Errorf("A for the stub's name:\n%s", out)
	}
	if out := ask("outside.example.test", "AAAA"); !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "ANSWER: 0") {
		t.Errorf("AAAA for the stub's name, want NODATA:\n%s", out)
	}
	if out := ask("other.example.test", "A"); !strings.Contains(out, "status: NXDOMAIN") {
		t.Errorf("A for another name, want NXDOMAIN:\n%s", out)
	}
}
