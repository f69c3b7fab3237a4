package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// TestMetricsEndpointsAreLoopbackOnly: the agent's --http and the
// resolver's (--http, or its deprecated --metrics) follow one rule
// (netflag.Loopback): an address off loopback stops the command at its
// start, naming the flag that lets it (--http-remote), on every address
// form, with the configuration's code (78).
func TestMetricsEndpointsAreLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster.json")
	writeAtomic(t, roster, `{"generation": 1, "zones": ["internal"], "names": {}}`)
	for _, addr := range []string{"0.0.0.0:9469", "[::]:9469", ":9469", "10.1.2.3:9469", "[fd7a::1]:9469"} {
		for _, c := range []struct {
			args   []string
			remote string
			exit   int
		}{
			{[]string{"agent", "--runtime", "memory", "--state", filepath.Join(dir, "state"), "--push", "off", "--http", addr}, "--http-remote", exitConfig},
			{[]string{"resolver", "--roster", roster, "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--http", addr}, "--http-remote", exitConfig},
			{[]string{"resolver", "--roster", roster, "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9", "--metrics", addr}, "--http-remote", exitConfig},
		} {
			// Bounded: a command that takes the address serves until
			// stopped.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var errb syncbuf.Buffer
			code := run(ctx, &environment{stdout: io.Discard, stderr: &errb, getenv: func(string) string { return "" }}, c.args)
			cancel()
			stderr := errb.String()
			if code != c.exit || !strings.Contains(stderr, c.remote) || !strings.Contains(stderr, "not a loopback address") {
				if len(stderr) > 300 {
					stderr = stderr[:300] + "..."
				}
				t.Errorf("meshhost %s = exit %d, %q; want exit %d naming %s", strings.Join(c.args, " "), code, stderr, c.exit, c.remote)
			}
		}
	}
}
