package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// TestValueCompletion: completion offers the values of the flags that
// take a few words (outputs, log levels and formats), and the held
// generations (the declaration approve takes, the roster roster accept
// takes) from the state directory.
func TestValueCompletion(t *testing.T) {
	dir := statedir.New(t.TempDir())
	if err := os.WriteFile(dir.Status(), []byte(`{"version": 2, "hold_above": 3, "held": {"generation": 7, "hold_above": 3, "replacements": []}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir.RosterHeld(), []byte(`{"served": 4, "newest": 9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"status", "--output", ""}, []string{"text", "json"}},
		{[]string{"agent", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"agent", "--log-format", ""}, []string{"text", "json"}},
		{[]string{"resolver", "--log-level", ""}, []string{"debug", "info", "warn", "error"}},
		{[]string{"agent", "--runtime", ""}, []string{"podman", "memory"}},
		{[]string{"approve", "--state", dir.Path(), ""}, []string{"7\tthe declaration held"}},
		{[]string{"roster", "--state", dir.Path(), ""}, []string{"diff", "accept"}},
		{[]string{"roster", "--state", dir.Path(), "accept", ""}, []string{"9\tthe roster held"}},
	} {
		var stdout syncbuf.Buffer
		run(context.Background(), &environment{stdout: &stdout, stderr: &syncbuf.Buffer{}, getenv: func(string) string { return "" }, defaultConfig: "/nonexistent"}, append([]string{"__complete"}, c.args...))
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		got := lines[:len(lines)-1] // the last is cobra's directive
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("meshhost %q completes %q, want %q", c.args, got, c.want)
		}
	}
}
