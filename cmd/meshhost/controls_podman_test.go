package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
)

// TestHoldAndFreezeOnPodman runs `meshhost agent --hold-above 1` against
// real podman: a declaration that would replace both of its containers is
// held (the containers keep their IDs, the resolver serves its roster) and
// says so in meshhost plan and status, /v1/report, the metric and one log
// line; meshhost approve releases it. Then meshhost freeze stops a change
// (the roster still moves), and unfreeze lets it through.
func TestHoldAndFreezeOnPodman(t *testing.T) {
	h := podmantest.New(t)
	state := t.TempDir()
	machine := strings.TrimSuffix(h.Prefix(), "-")
	push := filepath.Join(state, "push.sock")
	httpAddr, dnsAddr := dnstest.FreePort(t), dnstest.FreePort(t)
	agent := startAgent(t, "agent", "--runtime", "podman", "--podman", h.Socket(), "--machine", machine,
		"--state", state, "--push", "unix:"+push, "--http", httpAddr.String(), "--listen", dnsAddr.String(),
		"--interval", "1s", "--budget", "10", "--hold-above", "1", "--upstream", "127.0.0.1:9",
	)
	db, web := h.Name("db"), h.Name("web")
	decl := func(gen int, role string) string {
		return declDoc(machine, gen, "off", map[string]string{fmt.Sprintf("n%d.internal", gen): "10.1.1.1"}, fmt.Sprintf(
			`[{"name": %q, "image": %q, "command": ["sleep", "600"], "stop_timeout": "1s", "env": {"ROLE": %q}},
			  {"name": %q, "image": %q, "command": ["sleep", "600"], "stop_timeout": "1s", "env": {"ROLE": %q}}]`,
			db, podmantest.Image, role, web, podmantest.Image, role))
	}
	idOf := func(name string) string {
		out, err := h.Podman("inspect", "--format", "{{.Id}}/{{.State.Running}}", name)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(out)
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + httpAddr.String() + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	cli := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		env := &environment{stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
		code := run(context.Background(), env, append(args, "--state", state))
		return code, stdout.String() + stderr.String()
	}

	pushDeclaration(t, push, decl(1, "a"))
	eventually(t, "both containers run", 90*time.Second, func() bool {
		return strings.HasSuffix(idOf(db), "/true") && strings.HasSuffix(idOf(web), "/true")
	})
	dbID, webID := idOf(db), idOf(web)

	// 2: both containers' env changes: two replacements, more than 1.
	pushDeclaration(t, push, decl(2, "b"))
	eventually(t, "the report says declaration 2 is held", 30*time.Second, func() bool {
		var rep struct {
			Held *struct {
				Generation   uint64
				Replacements []struct{ Container string }
			}
		}
		return json.Unmarshal([]byte(get("/v1/report")), &rep) == nil && rep.Held != nil && rep.Held.Generation == 2 && len(rep.Held.Replacements) == 2
	})
	eventually(t, "the resolver serves roster 2 while the declaration is held", 10*time.Second, func() bool {
		return lookup(dnsAddr, "n2.internal.") == "10.1.1.1"
	})
	time.Sleep(3 * time.Second) // passes go by: still held, logged once
	if idOf(db) != dbID || idOf(web) != webID {
		t.Fatalf("a held declaration replaced containers: db %s -> %s, web %s -> %s", dbID, idOf(db), webID, idOf(web))
	}
	if m := get("/metrics"); !strings.Contains(m, "meshhost_agent_declaration_held 1") || !strings.Contains(m, "meshhost_agent_held_replacements 2") {
		t.Errorf("metrics do not show the hold:\n%s", grepLines(m, "held"))
	}
	if n := strings.Count(agent.logs.String(), "declaration 2 held: it would replace 2 containers, more than --hold-above 1"); n != 1 {
		t.Errorf("the hold was logged %d times, want once", n)
	}
	if code, out := cli("plan", "--podman", h.Socket()); code != 2 || !strings.Contains(out, "declaration 2 held") || !strings.Contains(out, "replace  "+db+": env: ~ROLE (") {
		t.Errorf("meshhost plan = %d:\n%s\nwant the hold and what it replaces", code, out)
	}
	if code, out := cli("status"); code != 0 || !strings.Contains(out, "HELD: declaration 2 held") {
		t.Errorf("meshhost status = %d:\n%s", code, out)
	}

	if code, out := cli("approve", "2"); code != 0 {
		t.Fatalf("meshhost approve 2 = %d: %s", code, out)
	}
	eventually(t, "approved, both containers are replaced and run", 90*time.Second, func() bool {
		d, w := idOf(db), idOf(web)
		return d != dbID && w != webID && strings.HasSuffix(d, "/true") && strings.HasSuffix(w, "/true")
	})
	if m := get("/metrics"); !strings.Contains(m, "meshhost_agent_declaration_held 0") {
		t.Errorf("after approve, metrics still show the hold:\n%s", grepLines(m, "held"))
	}

	// Frozen: declaration 3 moves the roster (copy mode: both containers'
	// hosts change) and db's env; held, and approved at once (only the
	// declaration held may be approved), it still waits for the
	// unfreeze.
	if code, out := cli("freeze", "--reason", "test"); code != 0 {
		t.Fatalf("meshhost freeze = %d: %s", code, out)
	}
	if code, out := cli("approve", "3"); code != 1 || !strings.Contains(out, "declaration 3 is not held") {
		t.Errorf("meshhost approve 3 before it is pushed = %d: %s; want 1: not held", code, out)
	}
	dbID, webID = idOf(db), idOf(web)
	pushDeclaration(t, push, strings.Replace(decl(3, "b"), `"env": {"ROLE": "b"}`, `"env": {"ROLE": "c"}`, 1))
	eventually(t, "the resolver serves roster 3 while frozen", 10*time.Second, func() bool {
		return lookup(dnsAddr, "n3.internal.") == "10.1.1.1"
	})
	eventually(t, "the report says frozen", 10*time.Second, func() bool { return strings.Contains(get("/v1/report"), `"frozen":true`) })
	eventually(t, "declaration 3 is held", 10*time.Second, func() bool {
		_, out := cli("status")
		return strings.Contains(out, "HELD: declaration 3 held")
	})
	if code, out := cli("approve", "3"); code != 0 {
		t.Fatalf("meshhost approve 3 = %d: %s", code, out)
	}
	time.Sleep(3 * time.Second)
	if idOf(db) != dbID || idOf(web) != webID {
		t.Fatalf("frozen, containers were replaced")
	}
	if code, out := cli("status"); code != 0 || !strings.Contains(out, "FROZEN since") {
		t.Errorf("meshhost status while frozen = %d:\n%s", code, out)
	}
	if code, out := cli("unfreeze"); code != 0 {
		t.Fatalf("meshhost unfreeze = %d: %s", code, out)
	}
	eventually(t, "unfrozen, both containers are replaced", 60*time.Second, func() bool {
		d, w := idOf(db), idOf(web)
		return d != dbID && w != webID && strings.HasSuffix(d, "/true") && strings.HasSuffix(w, "/true")
	})
	if code := agent.stop(t); code != 0 {
		t.Errorf("agent exited %d", code)
	}
}
