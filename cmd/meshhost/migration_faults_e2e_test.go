package main

// SIGKILL in the middle of a migration (issue 7, point 2): the agent, a
// subprocess, killed at each step of a machine's switch from copy mode to
// resolve mode and of the switch back. Helpers shared with the other SIGKILL
// test (fltBuild, fltStart, fltPS, fltList, fltActions, createEvents) are in
// e2e_helpers_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
)

// TestAgentSIGKILLMidMigration drives one machine through a migration and
// its rollback on real podman, with the agent (a subprocess) killed with
// SIGKILL and started again on the same state directory at every step. The
// machine runs db (on an internal network without DNS, with a named
// volume), api (same network, after db) and web (podman's default network,
// after api, with a named volume of its own); both networks reach the
// resolver through their gateway.
//
// Copy mode to resolve mode (flag on). The agents before the switch run
// without --probe-outside, so nothing can be proven and the containers
// stay in copy mode although the flag is already on; then the agent runs
// with the probe configured, and is killed:
//
//  1. while a probe container exists (label io.meshhost.probe): nothing is
//     recorded, the next agent probes again;
//  2. once the gate's state file says resolve, before any container is
//     touched (the agent's first stop request is held);
//  3. in the middle of the replacement of db, the first container of the
//     switch: db.meshhost-old aside, the new db created, not started (its
//     start request is held);
//  4. between containers: db switched, api and web not. Each killed agent
//     saved the charge of the replacement it began before its first podman
//     call, so a replacement budget of two per hour (for this agent and
//     the one before it; one per hour for the one before that) is spent by
//     db's two attempts, and holds the agent there, the replacements of
//     api and web deferred; the agent after it has the usual budget.
//
// Resolve mode back to copy mode (flag off), killed at each step of the
// replacement of db, the first container of the switch back:
//
//  5. once the state file says flag off, before any container is touched
//     (the first stop is held);
//  6. db stopped, not yet renamed aside (the rename is held);
//  7. db.meshhost-old aside, nothing under its name (the create is held);
//  8. the new db running, db.meshhost-old still aside (its removal is held).
//
// The steps inside a replacement last milliseconds: polling podman catches
// one by chance at best (a first, polling version of this test never saw
// the new db created and not started). So the agent talks to podman
// through a proxy (fltAPITrap) that holds the request of the step, and the
// agent is killed with it in flight, never forwarded.
//
// The restarted agents are never pushed the declaration again: they resume
// from the one the killed agent saved. At every kill no declared container
// is lost (each exists under its name or aside) and none was created more
// than once since its switch began; at the end of each switch every
// declared container runs in the declared mode, was created exactly once
// in the whole switch (podman's create events), nothing waits aside, the
// named volumes keep the files written before the migration, names resolve
// inside the containers, and further passes change nothing.
func TestAgentSIGKILLMidMigration(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // its agents bind bridge gateways' port 53
	if os.Geteuid() != 0 {
		msg := "the migration fault test needs root (its agents bind port 53 on bridge gateways)"
		needs.Missing(t, "%s", msg)
	}
	testStart := time.Now()
	bin := fltBuild(t)
	probe := buildMeshprobe(t, h)
	stub, err := startStubUpstream(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	// Probe containers are not named with the test's prefix, and an agent
	// killed mid-probe leaves its own behind: the cleanup removes those
	// that appeared during the test and are still there (it holds the
	// machine-wide lock, so no other test's agent probes meanwhile). It
	// runs after the agents are killed and before the probe image is
	// removed.
	probes := func() []fltObserved {
		rows, err := fltList(h, map[string][]string{"label": {migrations.LabelProbe}})
		if err != nil {
			t.Logf("listing probe containers: %v", err)
		}
		return rows
	}
	preexisting := map[string]bool{}
	for _, r := range probes() {
		preexisting[r.id] = true
	}
	t.Cleanup(func() {
		var left []string
		for _, r := range probes() {
			if !preexisting[r.id] {
				left = append(left, r.id)
			}
		}
		if len(left) == 0 {
			return
		}
		t.Logf("removing %d probe containers left by killed agents", len(left))
		if out, err := h.Podman(append([]string{"rm", "-f", "-t", "0"}, left...)...); err != nil {
			t.Errorf("removing leftover probe containers: %v: %s", err, out)
		}
	})

	trap := newAPITrap(t, h)
	state := t.TempDir()
	sock := filepath.Join(state, "push.sock")
	machine := strings.TrimSuffix(h.Prefix(), "-")
	logs := &syncbuf.Buffer{}
	defer func() {
		if t.Failed() {
			t.Logf("agent logs (all runs):\n%s", logs.String())
		}
	}()

	// Podman 4.3 gives an internal network without DNS a gateway only when
	// asked, and the gateway strategy needs one. Not the migration test's
	// subnet, in case a killed run of it left its network.
	intNet := h.Network("int", "--internal", "--disable-dns", "--subnet", "10.213.79.0/24", "--gateway", "10.213.79.1")
	db, api, web := h.Name("db"), h.Name("api"), h.Name("web")
	all := []string{db, api, web}
	dbVol, webVol := h.Name("dbvol"), h.Name("webvol")
	const cmd = `["sh", "-c", "trap \"exit 0\" TERM; sleep 600 & wait"]`
	// decl is the declaration of generation gen with the flag; the roster
	// never changes, so only the mode ever replaces a container.
	decl := func(gen int, flag string) string {
		return fmt.Sprintf(`{"schema": 1, "machine": %q, "generation": %d, "mesh_names": %q,
		  "roster": {"generation": 1, "zones": ["internal"], "names": {"alpha.internal": ["10.1.1.1"]}},
		  "containers": [
		    {"name": %q, "image": %q, "command": %s, "stop_timeout": "5s", "networks": [{"name": %q}],
		     "mounts": [{"type": "volume", "source": %q, "target": "/data"}]},
		    {"name": %q, "image": %q, "command": %s, "stop_timeout": "5s", "networks": [{"name": %q}], "depends_on": [%q]},
		    {"name": %q, "image": %q, "command": %s, "stop_timeout": "5s", "depends_on": [%q],
		     "mounts": [{"type": "volume", "source": %q, "target": "/data"}]}]}`,
			machine, gen, flag,
			db, podmantest.Image, cmd, intNet, dbVol,
			api, podmantest.Image, cmd, intNet, db,
			web, podmantest.Image, cmd, api, webVol)
	}

	// start starts an agent on the state directory, talking to podman
	// through the trap, with a replacement budget of budget an hour and
	// with the probe configured or not, and returns where its log begins.
	var agent *fltProc
	runs := 0
	start := func(what string, budget int, probing bool) int {
		runs++
		fmt.Fprintf(logs, "=== agent %d (%s) started at %s\n", runs, what, time.Now().Format(time.StampMilli))
		mark := len(logs.String())
		args := []string{"--runtime", "podman", "--podman", trap.uri(), "--machine", machine,
			"--state", state, "--push", "unix:" + sock, "--http", "off", "--interval", "1s",
			"--budget", strconv.Itoa(budget), "--budget-window", "1h",
			"--upstream", stub.String(), "--probe-binary", probe, "--node-local", "169.254.53.99", "--loopback", e2eLoopback}
		if probing {
			args = append(args, "--probe-outside", probeOutside+"="+probeOutsideAddr.String())
		}
		agent = fltStart(t, bin, logs, args...)
		return mark
	}
	// killWhen polls observe every `every` until it reports the moment
	// (a non-empty description of what it saw), the agent exits or limit
	// passes, then kills the agent with SIGKILL and returns what was seen.
	killWhen := func(point string, mark int, every, limit time.Duration, observe func() string) string {
		t.Helper()
		began := time.Now()
		seen := ""
		for deadline := began.Add(limit); seen == "" && !agent.exited() && time.Now().Before(deadline); {
			if seen = observe(); seen == "" {
				time.Sleep(every)
			}
		}
		exited := agent.exited()
		agent.kill()
		fmt.Fprintf(logs, "=== SIGKILL (%s): %s\n", point, seen)
		t.Logf("SIGKILL %s: %s, after %v; the agent had done: %s", point, seen,
			time.Since(began).Round(time.Millisecond), fltActions(logs.String()[mark:], h.Prefix()))
		switch {
		case exited:
			t.Fatalf("%s: the agent exited by itself", point)
		case seen == "":
			t.Fatalf("%s: the moment never came within %v", point, limit)
		}
		return seen
	}
	// killAtRequest kills the agent when it makes the podman request that
	// match describes (see fltAPITrap), with the request held. A nil match:
	// the trap is armed already.
	killAtRequest := func(point string, mark int, limit time.Duration, match func(r *http.Request, body []byte) string) {
		t.Helper()
		if match != nil {
			trap.arm(match)
		}
		defer trap.arm(nil)
		killWhen(point, mark, time.Millisecond, limit, trap.held)
	}

	// ctr is one container as podman inspects it.
	type ctr struct {
		id      string
		running bool
		resolve bool // it has DNS servers: resolve mode
		copied  bool // its hosts carry the roster: copy mode
	}
	inspect := func() map[string]ctr {
		out, _ := h.Podman(append([]string{"inspect", "--format",
			"{{.Name}}|{{.Id}}|{{.State.Running}}|{{.HostConfig.Dns}}|{{.HostConfig.ExtraHosts}}"}, all...)...)
		got := map[string]ctr{}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Split(line, "|"); len(f) == 5 {
				got[f[0]] = ctr{id: f[1], running: f[2] == "true", resolve: strings.Trim(f[3], "[]") != "",
					copied: strings.Contains(f[4], "alpha.internal:10.1.1.1")}
			}
		}
		return got
	}
	// ps returns name -> (ID, state) of the test's containers.
	ps := func() map[string]fltObserved {
		t.Helper()
		rows, err := fltPS(h)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]fltObserved{}
		for _, r := range rows {
			m[r.name] = r
		}
		return m
	}
	// settled returns the IDs of the declared containers when each runs,
	// in the mode wanted, under its name, and nothing else is there.
	settled := func(resolve bool) (map[string]string, bool) {
		rows, err := fltPS(h)
		if err != nil {
			return nil, false
		}
		ids := map[string]string{}
		for _, r := range rows {
			if !slices.Contains(all, r.name) || r.state != "running" {
				return nil, false
			}
			ids[r.name] = r.id
		}
		if len(ids) != len(all) {
			return nil, false
		}
		for name, c := range inspect() {
			if c.id != ids[name] || !c.running || c.resolve != resolve || c.copied == resolve {
				return nil, false
			}
		}
		return ids, true
	}
	// intact fails the test unless every declared container exists (under
	// its name, or aside while a replacement is unfinished) and none has
	// been created more than once since its switch began.
	intact := func(point string, since time.Time) {
		t.Helper()
		have := ps()
		for _, n := range all {
			if _, ok := have[n]; !ok {
				if _, ok := have[n+reconcile.AsideSuffix]; !ok {
					t.Errorf("%s: %s is lost: neither it nor %s exists", point, n, n+reconcile.AsideSuffix)
				}
			}
		}
		for n, k := range createEvents(t, h, since, all) {
			if k > 1 {
				t.Errorf("%s: %s was created %d times since its switch began", point, n, k)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	// expect fails the test unless the test's containers are exactly want
	// (name -> ID, state; an empty ID: any), right after a kill.
	expect := func(point string, want map[string]fltObserved) {
		t.Helper()
		got := ps()
		ok := len(got) == len(want)
		for name, w := range want {
			g, found := got[name]
			ok = ok && found && g.state == w.state && (w.id == "" || g.id == w.id)
		}
		if !ok {
			t.Errorf("%s: the containers are %v, want %v", point, got, want)
		}
	}
	// running is the containers of ids, running; with is m with rows set
	// (a row without a state: removed).
	running := func(ids map[string]string) map[string]fltObserved {
		m := map[string]fltObserved{}
		for n, id := range ids {
			m[n] = fltObserved{id, n, "running"}
		}
		return m
	}
	with := func(m map[string]fltObserved, rows ...fltObserved) map[string]fltObserved {
		m = maps.Clone(m)
		for _, r := range rows {
			if r.state == "" {
				delete(m, r.name)
			} else {
				m[r.name] = r
			}
		}
		return m
	}
	gateState := func() *migrations.State {
		t.Helper()
		st, err := migrations.LoadState(statedir.New(state).Migrations())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	networksResolve := func(st *migrations.State, resolve bool) bool {
		for _, n := range []string{"podman", intNet} {
			if ns := st.Networks[n]; ns == nil || ns.Resolve != resolve {
				return false
			}
		}
		return true
	}
	// converged waits until the switch to the mode wanted is over, checks
	// it as the doc comment says, and returns the containers' IDs.
	converged := func(sw string, mark int, since time.Time, before map[string]string, resolve bool) map[string]string {
		t.Helper()
		var ids map[string]string
		eventually(t, sw+" converges", 90*time.Second, func() bool {
			var ok bool
			ids, ok = settled(resolve)
			return ok
		})
		time.Sleep(2500 * time.Millisecond) // more passes: nothing moves
		t.Logf("%s: the last agent did: %s", sw, fltActions(logs.String()[mark:], h.Prefix()))
		if again, ok := settled(resolve); !ok || !maps.Equal(again, ids) {
			t.Errorf("%s: the machine moved after converging: %v -> %v", sw, ids, again)
		}
		if got, want := createEvents(t, h, since, all), map[string]int{db: 1, api: 1, web: 1}; !maps.Equal(got, want) {
			t.Errorf("%s: containers created %v, want each exactly once", sw, got)
		}
		for _, n := range all {
			if ids[n] == before[n] {
				t.Errorf("%s: %s was not replaced", sw, n)
			}
		}
		for _, c := range []string{db, web} {
			if got := h.Exec(c, "cat", "/data/file"); got != "kept "+c+"\n" {
				t.Errorf("%s: %s's volume file reads %q, want %q", sw, c, got, "kept "+c+"\n")
			}
		}
		if st := gateState(); !networksResolve(st, resolve) {
			t.Errorf("%s: the gate's networks are not all in resolve=%v: podman %+v, %s %+v", sw, resolve,
				st.Networks["podman"], intNet, st.Networks[intNet])
		}
		for _, c := range all {
			if resolve {
				// The restarted agent exposed the resolver where the
				// killed one had proven it.
				if out, _ := h.Podman("exec", c, "nslookup", "alpha.internal"); !strings.Contains(out, "10.1.1.1") {
					t.Errorf("%s: alpha.internal does not resolve in %s:\n%s", sw, c, out)
				}
			} else if hosts := h.Exec(c, "cat", "/etc/hosts"); !strings.Contains(hosts, "10.1.1.1\talpha.internal") {
				t.Errorf("%s: %s's /etc/hosts lacks the roster:\n%s", sw, c, hosts)
			}
		}
		if agent.exited() {
			t.Fatalf("%s: the agent exited", sw)
		}
		if t.Failed() {
			t.FailNow()
		}
		return ids
	}
	// Matchers of the agent's podman requests for killAtRequest.
	op := func(r *http.Request, method, verb string) (id string, ok bool) {
		_, rest, found := strings.Cut(r.URL.Path, "/containers/")
		id, v, _ := strings.Cut(rest, "/")
		return id, found && r.Method == method && v == verb
	}
	nameOf := func(id string) string {
		rows, _ := fltList(h, map[string][]string{"id": {id}})
		if len(rows) != 1 {
			return ""
		}
		return rows[0].name
	}
	firstStop := func(r *http.Request, _ []byte) string {
		if id, ok := op(r, http.MethodPost, "stop"); ok {
			return "the first stop (of " + strings.TrimPrefix(nameOf(id), h.Prefix()) + ") held"
		}
		return ""
	}

	// Before: copy mode. Then the flag goes on, but no agent can probe yet
	// (no --probe-outside), so nothing switches.
	start("flag off, no probe", 100, false)
	pushDeclaration(t, sock, decl(1, "off"))
	var copyIDs map[string]string
	eventually(t, "the containers run in copy mode", 60*time.Second, func() bool {
		var ok bool
		copyIDs, ok = settled(false)
		return ok
	})
	for _, c := range []string{db, web} {
		h.Exec(c, "sh", "-c", "echo kept "+c+" > /data/file")
	}
	switch1 := time.Now()
	mark := len(logs.String())
	pushDeclaration(t, sock, decl(2, "on"))
	eventually(t, "the agent takes the flag on", 10*time.Second, func() bool {
		return strings.Contains(logs.String()[mark:], `msg="mesh names flag changed"`)
	})
	time.Sleep(1500 * time.Millisecond) // a pass with the flag on
	if ids, ok := settled(false); !ok || !maps.Equal(ids, copyIDs) {
		t.Fatalf("with the flag on but nothing proven the containers changed: %v -> %v", copyIDs, ids)
	}
	agent.kill() // the upgrade to an agent that probes

	// 1. During the probe: a probe container exists for seconds, so a poll
	// catches it.
	mark = start("flag on, probing", 100, true)
	killWhen("during the probe", mark, 20*time.Millisecond, 60*time.Second, func() string {
		for _, r := range probes() {
			if !preexisting[r.id] {
				return fmt.Sprintf("probe container %s %s", r.name, r.state)
			}
		}
		return ""
	})
	intact("after the kill during the probe", switch1)
	expect("after the kill during the probe", running(copyIDs))
	if st := gateState(); networksResolve(st, true) {
		t.Errorf("killed during the probe, the gate switched")
	}

	// 2. Once the state says resolve, at the first stop. This agent has a
	// budget of one replacement an hour, which db's replacement takes (and
	// saves, before the stop).
	mark = start("probing again", 1, true)
	killAtRequest("once the switch is saved", mark, 90*time.Second, firstStop)
	intact("after the kill once the switch was saved", switch1)
	expect("after the kill once the switch was saved", running(copyIDs))
	if !networksResolve(gateState(), true) {
		t.Errorf("at the agent's first stop, the gate's state does not say resolve")
	}

	// 3. The new db created, not started. Two replacements an hour: the
	// first was taken by the killed agent's attempt at db.
	mark = start("switching, two replacements an hour", 2, true)
	killAtRequest("mid-replacement of the first container", mark, 60*time.Second, func(r *http.Request, _ []byte) string {
		if id, ok := op(r, http.MethodPost, "start"); ok && id != copyIDs[db] && nameOf(id) == db {
			return "the new db's start held"
		}
		return ""
	})
	intact("after the kill mid-replacement", switch1)
	expect("after the kill mid-replacement", with(running(copyIDs),
		fltObserved{"", db, "created"}, fltObserved{copyIDs[db], db + reconcile.AsideSuffix, "exited"}))
	if m := inspect()[db]; !m.resolve {
		t.Errorf("the new db, created by the killed agent, is not in resolve mode")
	}

	// 4. Between containers: db switched (resuming is not charged), api and
	// web deferred by the budget, spent by the two killed agents' attempts
	// at db.
	mark = start("resuming, two replacements an hour", 2, true)
	killWhen("between containers", mark, 50*time.Millisecond, 60*time.Second, func() string {
		for _, line := range strings.Split(logs.String()[mark:], "\n") {
			if strings.Contains(line, "replacement deferred") && strings.Contains(line, "container="+web) {
				return "web's replacement deferred by the budget"
			}
		}
		return ""
	})
	intact("after the kill between containers", switch1)
	// The killed agents' charges were remembered (issue 7: they were lost
	// when reconciler.json was saved only after a pass, and api was
	// replaced here).
	if got := inspect(); !got[db].resolve || got[api].resolve || got[api].id != copyIDs[api] ||
		got[web].resolve || got[web].id != copyIDs[web] {
		t.Errorf("killed between containers, the machine is not half switched (db in resolve mode, api and web as before): %+v", got)
	}
	expect("after the kill between containers", with(running(copyIDs), fltObserved{"", db, "running"}))

	mark = start("finishing the switch", 100, true)
	resolveIDs := converged("copy to resolve", mark, switch1, copyIDs, true)

	// An agent restarted without a probe still serves the resolver where
	// the gate proved it, from its first pass (issue 7: exposure waited for
	// a prober, and resolve-mode containers asked an address nobody served).
	agent.kill()
	start("restarted without a probe", 100, false)
	for _, c := range all {
		// 60 s: the restarted agent connects, sweeps and passes first, and
		// each podman exec takes a second on a loaded machine.
		eventually(t, "alpha.internal resolves in "+c+" under an agent without a probe", 60*time.Second, func() bool {
			out, _ := h.Podman("exec", c, "nslookup", "alpha.internal")
			return strings.Contains(out, "10.1.1.1")
		})
	}
	for n, c := range inspect() {
		if c.id != resolveIDs[n] || !c.resolve {
			t.Errorf("restarted without a probe, %s changed: %+v, was %s in resolve mode", n, c, resolveIDs[n])
		}
	}

	// 5. The flag goes off (the rollback): killed at the first stop.
	switch2 := time.Now()
	mark = len(logs.String())
	trap.arm(firstStop) // before the push: the pass begins at once
	pushDeclaration(t, sock, decl(3, "off"))
	killAtRequest("once the flag off is saved", mark, 30*time.Second, nil)
	intact("after the kill once the flag off was saved", switch2)
	expect("after the kill once the flag off was saved", running(resolveIDs))
	if st := gateState(); st.Flag != "off" || !networksResolve(st, false) {
		t.Errorf("at the agent's first stop, the gate's state does not say flag off, copy mode: flag %s", st.Flag)
	}

	// 6. db stopped, not renamed aside.
	mark = start("switching back", 100, true)
	killAtRequest("before the first rename", mark, 60*time.Second, func(r *http.Request, _ []byte) string {
		if id, ok := op(r, http.MethodPost, "rename"); ok && id == resolveIDs[db] {
			return "db's rename aside held"
		}
		return ""
	})
	intact("after the kill before the rename", switch2)
	expect("after the kill before the rename", with(running(resolveIDs), fltObserved{resolveIDs[db], db, "exited"}))

	// 7. db aside, nothing under its name.
	mark = start("switching back again", 100, true)
	killAtRequest("before the first create", mark, 60*time.Second, func(r *http.Request, body []byte) string {
		var c struct {
			Name string `json:"name"`
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/containers/create") &&
			json.Unmarshal(body, &c) == nil && c.Name == db {
			return "the new db's create held"
		}
		return ""
	})
	intact("after the kill before the create", switch2)
	expect("after the kill before the create", with(running(resolveIDs),
		fltObserved{name: db}, fltObserved{resolveIDs[db], db + reconcile.AsideSuffix, "exited"}))

	// 8. The new db running, the old one still aside.
	mark = start("switching back, resumed", 100, true)
	killAtRequest("before the first removal", mark, 60*time.Second, func(r *http.Request, _ []byte) string {
		if id, ok := op(r, http.MethodDelete, ""); ok && id == resolveIDs[db] {
			return "the removal of db.meshhost-old held"
		}
		return ""
	})
	intact("after the kill before the removal", switch2)
	expect("after the kill before the removal", with(running(resolveIDs),
		fltObserved{"", db, "running"}, fltObserved{resolveIDs[db], db + reconcile.AsideSuffix, "exited"}))

	mark = start("finishing the switch back", 100, true)
	converged("resolve to copy", mark, switch2, resolveIDs, false)
	t.Logf("the migration and back, with %d agents, took %v", runs, time.Since(testStart).Round(time.Second))
}

// fltAPITrap serves podman's API on a socket of its own and forwards each
// request to the test's podman service, except the first one its armed
// matcher describes: that one it holds, never forwarding it, and reports
// (held), so that the test kills the agent with the request in flight.
type fltAPITrap struct {
	sock    string
	proxy   *httputil.ReverseProxy
	release chan struct{} // closed at the test's end: held requests return
	hits    chan string

	// mu guards match, and serializes matching.
	mu    sync.Mutex
	match func(r *http.Request, body []byte) string
}

func newAPITrap(t *testing.T, h *podmantest.Harness) *fltAPITrap {
	t.Helper()
	dir, err := os.MkdirTemp("", "mhtrap-") // short: a socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	p := &fltAPITrap{sock: filepath.Join(dir, "podman.sock"), release: make(chan struct{}), hits: make(chan string, 1)}
	l, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	upstream := strings.TrimPrefix(strings.TrimPrefix(h.Socket(), "unix://"), "unix:")
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", "d", "d"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", upstream)
		}},
		FlushInterval: -1, // logs and waits stream
		// A killed agent's requests in flight are cancelled: say nothing.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(l)
	t.Cleanup(func() {
		close(p.release)
		srv.Close()
		os.RemoveAll(dir)
	})
	return p
}

// uri is the trap's socket, for --podman.
func (p *fltAPITrap) uri() string { return "unix://" + p.sock }

// arm sets the matcher of the request to hold: it returns a description
// of the request, or "" to forward it. Nil disarms the trap.
func (p *fltAPITrap) arm(match func(r *http.Request, body []byte) string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match = match
	select {
	case <-p.hits: // a hit no one waited for
	default:
	}
}

// held returns the description of the request held since the trap was
// armed, or "".
func (p *fltAPITrap) held() string {
	select {
	case what := <-p.hits:
		return what
	default:
		return ""
	}
}

func (p *fltAPITrap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	what := ""
	if p.match != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			p.mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if what = p.match(r, body); what != "" {
			p.match = nil
			p.hits <- what
		}
	}
	p.mu.Unlock()
	if what == "" {
		p.proxy.ServeHTTP(w, r)
		return
	}
	// Held until the agent, killed, hangs up.
	select {
	case <-r.Context().Done():
	case <-p.release:
	}
	http.Error(w, "held by the test", http.StatusServiceUnavailable)
}
