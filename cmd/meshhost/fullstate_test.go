package main

// Issue 7: an agent whose state directory fills up. These tests mount a
// small tmpfs as the state directory (root only; skipped otherwise, failed
// under CI=true) and run `meshhost agent --runtime memory` in-process, so
// they need no podman. Helpers here are prefixed "fs".

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/fullfs"
)

// fsDecl is a declaration of n containers and roster generation gen, whose
// names are alpha.internal and n1..n<gen>.internal (fltRoster).
func fsDecl(gen, n int) string {
	var cs []string
	for i := range n {
		cs = append(cs, fmt.Sprintf(`{"name": "app%d", "image": "busybox", "command": ["sleep", "600"]}`, i))
	}
	return fmt.Sprintf(`{"schema": 1, "machine": "full", "generation": %d, "mesh_names": "off", "roster": %s, "containers": [%s]}`,
		gen, fltRoster(gen), strings.Join(cs, ", "))
}

// TestAgentFullStateDir runs the agent on a state directory that fills up.
// With nothing new to save its passes go on succeeding. A new declaration
// fails every pass with an error naming the declaration file and "no space
// left on device" (in the log and in /healthz, 503), while the agent keeps
// running, its resolver keeps answering the roster in force, and every
// state file stays byte for byte as it was, parses, and has no temporary
// file next to it. Restarted on the still-full directory, the agent serves
// the saved roster and its passes succeed (it writes nothing it already
// has). Once space is back the new declaration goes through.
func TestAgentFullStateDir(t *testing.T) {
	state := fullfs.Mount(t, 1<<20)
	sock := filepath.Join(t.TempDir(), "push.sock")
	dnsAddr, httpAddr := dnstest.FreePort(t), dnstest.FreePort(t)
	args := []string{"--runtime", "memory", "--machine", "full", "--state", state, "--push", "unix:" + sock,
		"--http", httpAddr.String(), "--listen", dnsAddr.String(), "--interval", "200ms", "--upstream", "127.0.0.1:9"}
	logs, done, stop := fltInProcess(t, args...)
	push := fltPusher(sock)
	if err := push(fsDecl(1, 2)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "generation 1 is applied and the agent is healthy", 20*time.Second, func() bool {
		code, _ := healthzOf(httpAddr)
		return code == http.StatusOK && strings.Contains(logs.String(), `msg="declaration applied"`) && lookup(dnsAddr, "n1.internal.") == "10.2.0.1"
	})
	files := fullfs.Snapshot(t, state)
	for _, f := range []string{statedir.New(state).Declaration(), statedir.New(state).Roster()} {
		if _, ok := files[f]; !ok {
			t.Fatalf("no %s in the state directory: %v", f, slices.Collect(maps.Keys(files)))
		}
	}
	fullfs.Fill(t, state, 0)
	t.Logf("state directory full: %d bytes free", fullfs.Free(t, state))

	// Passes with nothing new to save.
	mark := len(logs.String())
	time.Sleep(time.Second)
	if after := logs.String()[mark:]; strings.Contains(after, "pass failed") {
		t.Errorf("on a full disk a pass with nothing new failed:\n%s", after)
	}
	if code, body := healthzOf(httpAddr); code != http.StatusOK {
		t.Errorf("on a full disk with nothing new: /healthz %d %s", code, body)
	}

	// A new declaration: every pass fails, clearly, and touches nothing.
	declPath := statedir.New(state).Declaration()
	if err := push(fsDecl(2, 3)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "passes fail naming the declaration file and the full disk", 10*time.Second, func() bool {
		for _, line := range strings.Split(logs.String()[mark:], "\n") {
			if strings.Contains(line, "pass failed") && strings.Contains(line, declPath) && strings.Contains(line, "no space left on device") {
				return strings.Count(logs.String()[mark:], "pass failed") >= 3
			}
		}
		return false
	})
	for _, line := range strings.Split(logs.String()[mark:], "\n") {
		if strings.Contains(line, "pass failed") {
			t.Logf("the agent logged: %s", line)
			break
		}
	}
	code, body := healthzOf(httpAddr)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, declPath) || !strings.Contains(body, "no space left on device") {
		t.Errorf("/healthz on a full disk: %d %q; want 503 naming %s and the full disk", code, body, declPath)
	}
	select {
	case <-done:
		t.Fatal("the agent stopped on a full disk")
	default:
	}
	for name, want := range map[string]string{"alpha.internal.": "10.1.1.1", "n1.internal.": "10.2.0.1"} {
		if got := lookupWithin(dnsAddr, name, 3*time.Second); got != want {
			t.Errorf("on a full disk %s resolves to %q, want %q", name, got, want)
		}
	}
	// Generation 2's name is not served: an NXDOMAIN, not a lookup that
	// timed out.
	if r, err := dnstest.Exchange(dns.NewMsg("n2.internal.", dns.TypeA), "udp", dnsAddr.String(), 3*time.Second); err != nil {
		t.Errorf("on a full disk n2.internal. gets no answer: %v; want NXDOMAIN", err)
	} else if r.Rcode != dns.RcodeNameError {
		t.Errorf("on a full disk n2.internal. gets %s %v; want NXDOMAIN", dns.RcodeToString[r.Rcode], r.Answer)
	}
	fsCheckState(t, state, files, 1)

	// A restart on the still-full directory.
	stop()
	logs, done, stop = fltInProcess(t, args...)
	eventually(t, "the restarted agent serves the saved roster and is healthy", 20*time.Second, func() bool {
		code, _ := healthzOf(httpAddr)
		return code == http.StatusOK && strings.Contains(logs.String(), `msg="declaration applied"`) && lookup(dnsAddr, "n1.internal.") == "10.2.0.1"
	})
	time.Sleep(time.Second) // a few passes
	if strings.Contains(logs.String(), "pass failed") {
		t.Errorf("restarted on a full disk with nothing new, a pass failed:\n%s", logs.String())
	}
	fsCheckState(t, state, files, 1)

	// Space is back: the controller pushes generation 2 again, and it goes
	// through.
	if err := push(fsDecl(2, 3)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "generation 2 fails to save", 10*time.Second, func() bool { return strings.Contains(logs.String(), "pass failed") })
	if err := os.Remove(filepath.Join(state, fullfs.FillerName)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "generation 2 is applied once space is back", 20*time.Second, func() bool {
		code, _ := healthzOf(httpAddr)
		d, _ := agent.LoadDeclaration(statedir.New(state))
		return code == http.StatusOK && d != nil && d.Generation == 2 && lookup(dnsAddr, "n2.internal.") == "10.2.0.2"
	})
	select {
	case <-done:
		t.Fatal("the agent stopped")
	default:
	}
}

// fsCheckState checks that the state files are what they were (files),
// parse as generation gen, and have no temporary file next to them.
func fsCheckState(t *testing.T, state string, files map[string]string, gen uint64) {
	t.Helper()
	// The agent retries its pass every interval, and each try writes a
	// temporary file that the failed write removes at once: a snapshot can
	// catch one in that instant. Only one that stays is left behind.
	var now map[string]string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		now = fullfs.Snapshot(t, state)
		transient := false
		for p := range now {
			if ok, _ := filepath.Match(".*.tmp-*", filepath.Base(p)); ok {
				transient = true
			}
		}
		if !transient || time.Now().After(deadline) {
			break
		}
	}
	journalDir := statedir.New(state).Journal() + string(filepath.Separator)
	for p, data := range files {
		switch {
		case now[p] == data:
		case strings.HasPrefix(p, journalDir) && strings.HasPrefix(now[p], data):
			// A journal segment takes an entry that fits in its last
			// page, full disk or not: appended whole, checked below.
		default:
			t.Errorf("%s changed on a full disk", p)
		}
	}
	if j, err := journal.Open(statedir.New(state).Journal(), journal.Options{}); err != nil {
		t.Errorf("the journal after a full disk: %v", err)
	} else if _, err := j.History(); err != nil {
		t.Errorf("the journal's history after a full disk: %v", err)
	}
	for p := range now {
		if _, ok := files[p]; !ok {
			t.Errorf("%s appeared on a full disk", p)
		}
	}
	if d, err := agent.LoadDeclaration(statedir.New(state)); err != nil || d == nil || d.Generation != gen {
		t.Errorf("the saved declaration: %v, %v; want generation %d", d, err, gen)
	}
	if tmps := fullfs.TempFiles(t, state); len(tmps) != 0 {
		t.Errorf("temporary files left behind: %v", tmps)
	}
}
