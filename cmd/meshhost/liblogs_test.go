package main

import (
	"bytes"
	"encoding/json"
	"log"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/meshhost/meshhost/internal/plumbing/logging"
)

// TestRouteLibraryLogs: in JSON mode, what podman's bindings log through
// logrus and what Go's log package writes (net/http's servers) come out as
// the agent's JSON lines, at their level.
func TestRouteLibraryLogs(t *testing.T) {
	var buf bytes.Buffer
	l, err := logging.New(&buf, logging.Options{Format: logging.JSON})
	if err != nil {
		t.Fatal(err)
	}
	routeLibraryLogs(l)
	logrus.WithField("path", "/run/podman/podman.sock").Warn("bindings say")
	log.Print("http: Accept error: too many open files; retrying in 5ms")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []struct{ level, msg string }{{"WARN", "bindings say"}, {"INFO", "http: Accept error: too many open files; retrying in 5ms"}} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", lines[i], err)
		}
		if m["level"] != want.level || m["msg"] != want.msg {
			t.Errorf("line %d = %v, want level %s msg %q", i, m, want.level, want.msg)
		}
	}
}
