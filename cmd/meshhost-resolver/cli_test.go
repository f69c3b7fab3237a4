package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// TestCommandLine: meshhost-resolver is on meshhost's command library:
// help on stdout with exit 0, 64 for an unknown flag or argument, flags
// after the positional arguments, 78 for a refused configuration.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster.json")
	if err := os.WriteFile(roster, []byte(`{"generation": 1, "zones": ["internal"], "names": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args     []string
		code     int
		stdout   string // contained
		stderr   string // contained; "" wants none
		noStderr bool
	}{
		{[]string{"-h"}, 0, "Usage:", "", true},
		{[]string{"--help"}, 0, "Usage:", "", true},
		{[]string{"config", "check", "--help"}, 0, "Usage:", "", true},
		{[]string{"--no-such-flag"}, 64, "", "unknown flag: --no-such-flag", false},
		{[]string{"config", "check", "--no-such-flag"}, 64, "", "unknown flag: --no-such-flag", false},
		{[]string{"serve"}, 64, "", "unexpected arguments", false},
		{[]string{"config", "check", "--listen", "127.0.0.1:5353", "--roster", roster}, 0, "(no --config): ok", "", true},
		{[]string{"config", "check", "--roster", roster}, 78, "", "--listen", false},
		{[]string{"--roster", roster, "--listen", "127.0.0.1:5353", "--ttl", "-1s"}, 78, "", `--ttl: "-1s" is negative`, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var stdout, stderr syncbuf.Buffer
		code := run(ctx, &stdout, &stderr, func(string) string { return "" }, c.args)
		cancel()
		if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.stderr) || c.noStderr && stderr.String() != "" {
			t.Errorf("meshhost-resolver %q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q (none: %t)",
				c.args, code, stdout.String(), stderr.String(), c.code, c.stdout, c.stderr, c.noStderr)
		}
	}
}
