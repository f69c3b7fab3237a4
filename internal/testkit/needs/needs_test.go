package needs

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test was stopped.
type recorder struct {
	testing.TB
	how, msg string
}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.how, r.msg = "fail", args[0].(string) }
func (r *recorder) Skip(args ...any)  { r.how, r.msg = "skip", args[0].(string) }

// TestMissing: outside CI a missing dependency skips, under CI=true it
// fails, and both say what is missing.
func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		ci, want string
	}{
		{ci: "", want: "skip"},
		{ci: "false", want: "skip"},
		{ci: "true", want: "fail"},
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := &recorder{TB: t}
			Missing(r, "dig not found; apt-get install %s", "bind9-dnsutils")
			if r.how != tc.want || !strings.Contains(r.msg, "dig not found; apt-get install bind9-dnsutils") {
				t.Errorf("Missing under CI=%q: %s %q, want %s naming what is missing", tc.ci, r.how, r.msg, tc.want)
			}
		})
	}
}

// TestTool: a command on PATH is found and nothing stops the test; a
// missing one stops it naming the package.
func TestTool(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	if path := Tool(r, "sh", "dash"); path == "" || r.how != "" {
		t.Errorf("Tool(sh) = %q, stopped: %s %q; want a path and no stop", path, r.how, r.msg)
	}
	Tool(r, "no-such-tool-meshhost", "meshhost-nothing")
	if r.how != "fail" || !strings.Contains(r.msg, "apt-get install meshhost-nothing") {
		t.Errorf("Tool(missing) under CI: %s %q, want a failure naming the package", r.how, r.msg)
	}
}
