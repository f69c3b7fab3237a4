package procmetrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
)

// TestServe scrapes a registry served on loopback: the build's labels and
// the Go and process collectors are there.
func TestServe(t *testing.T) {
	reg := NewRegistry()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, reg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve after cancel = %v, want nil", err)
		}
	}()
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	in := buildinfo.Get()
	want := `meshhost_build_info{goversion="` + in.Go + `",revision="` + in.Commit + `",version="` + in.Version + `"} 1`
	for _, w := range []string{want, "go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(string(body), w) {
			t.Errorf("/metrics lacks %q:\n%s", w, body)
		}
	}
}
