package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/spec"
)

// The operator's controls: status, approve, freeze, unfreeze, rollback.
// They act on the agent's state directory, which the agent reads at every
// pass, so they work whether or not the agent runs.

func init() {
	register(command{name: "status", summary: "the declaration in force, a blast-radius hold, a freeze, the migration flag", define: defineStatus})
	register(command{name: "approve", use: "GEN", args: cobra.ExactArgs(1), summary: "let declaration generation GEN, the one held (meshhost status), go ahead, paced by the replacement budget", define: defineApprove})
	register(command{name: "freeze", summary: "no container is created, replaced or removed until unfreeze; DNS keeps serving", define: defineFreeze})
	register(command{name: "unfreeze", summary: "let passes apply their plans again", define: defineUnfreeze})
	register(command{name: "rollback", use: "GEN", args: cobra.ExactArgs(1), summary: "re-issue journaled declaration GEN as a new generation, through the same plan, hold and budget",
		long: "The containers and mesh_names of GEN come back; the roster stays the one in force (names never go back).", define: defineRollback})
}

// existingState returns the state directory at path, refusing one that
// does not exist: a typo must not make a new, empty one that the agent
// never reads.
func existingState(path string) (statedir.Dir, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return statedir.Dir{}, fmt.Errorf("state directory %s does not exist (is it the agent's --state?)", path)
	case err != nil:
		return statedir.Dir{}, fmt.Errorf("state directory: %w", err)
	case !fi.IsDir():
		return statedir.Dir{}, fmt.Errorf("state directory %s is not a directory", path)
	}
	return statedir.New(path), nil
}

// statusJSON is `meshhost status --output json`.
type statusJSON struct {
	Machine          string         `json:"machine,omitempty"`
	Generation       uint64         `json:"generation"`
	MeshNames        string         `json:"mesh_names,omitempty"`
	Containers       int            `json:"containers"`
	RosterGeneration uint64         `json:"roster_generation"`
	HoldAbove        int            `json:"hold_above"`
	Held             *pass.Hold     `json:"held,omitempty"`
	Approved         uint64         `json:"approved,omitempty"`
	Frozen           *agent.Freeze  `json:"frozen,omitempty"`
	Migration        *migrationJSON `json:"migration,omitempty"`
	// RosterHeld is the roster change the guard holds (what roster accept
	// may release), nil when none.
	RosterHeld *agent.RosterHold `json:"roster_held,omitempty"`
	// SetAside lists damaged logs kept for the operator (statedir.SetAside).
	SetAside []string `json:"set_aside,omitempty"`
	// AgentStatus is false when the agent has written no status yet (never
	// run a pass with this meshhost).
	AgentStatus bool `json:"agent_status"`
	// Agent says whether an agent holds the state directory now.
	Agent livenessJSON `json:"agent"`
	// Resolver says whether the resolver serving this machine answers.
	Resolver *livenessJSON `json:"resolver,omitempty"`
	// LastPass is the newest pass the journal holds (a pass that only
	// kept containers is not journalled); nil for none.
	LastPass *lastPassJSON `json:"last_pass,omitempty"`
	// Releases are the operator's commands that release what holds the
	// machine now (a held declaration, a held roster, a freeze).
	Releases []releaseJSON `json:"releases,omitempty"`
}

// livenessJSON is whether the agent (Running, PID) or the resolver
// (Running: it answered, with roster Generation) is up; Error says why it
// is not known, or why the resolver did not answer.
type livenessJSON struct {
	Running    bool   `json:"running"`
	PID        int    `json:"pid,omitempty"`
	Generation uint64 `json:"roster_generation,omitempty"`
	Error      string `json:"error,omitempty"`
}

// lastPassJSON is a pass of the journal as status shows it: Result is
// ok, deferred (the budget left some of its plan for later), failed,
// held or frozen (nothing of its plan applied).
type lastPassJSON struct {
	Seq        uint64       `json:"seq"`
	Time       time.Time    `json:"time"`
	Generation uint64       `json:"generation,omitempty"`
	Result     string       `json:"result"`
	Summary    string       `json:"summary"`
	Deferred   []actionView `json:"deferred,omitempty"`
	Failed     []actionView `json:"failed,omitempty"`
}

// releaseJSON is what holds the machine and the command that releases it.
type releaseJSON struct {
	Hold    string `json:"hold"` // declaration, roster or frozen
	Command string `json:"command"`
}

type migrationJSON struct {
	Flag     string        `json:"flag"`
	Paused   bool          `json:"paused"`
	Networks []networkJSON `json:"networks,omitempty"`
}

// networkJSON is one network's migration: its containers' mode (resolve
// once its probe passed and the flag allows, else copy) and its last
// probe.
type networkJSON struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Present   bool   `json:"present"`
	Mode      string `json:"mode"`       // resolve or copy
	LastProbe string `json:"last_probe"` // passed, failed or none
	Failures  int    `json:"failures,omitempty"`
}

func defineStatus(env *environment, fs *flag.FlagSet) runner {
	state := fs.String("state", statedir.Default, "the agent's state directory")
	output := fs.String("output", "text", "output format: text or json")
	return func(ctx context.Context, args []string) (int, error) {
		if *output != "text" && *output != "json" {
			return exitUsage, fmt.Errorf("--output %q: want text or json", *output)
		}
		dir, err := existingState(*state)
		if err != nil {
			return 1, err
		}
		out, applied, err := readStatus(ctx, env, dir)
		if err != nil {
			return 1, err
		}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(out)
		}
		printStatus(env.stdout, dir, &out, applied)
		return 0, nil
	}
}

// readStatus reads what status shows from the state directory; with
// applied false, no declaration was applied yet.
func readStatus(ctx context.Context, env *environment, dir statedir.Dir) (out statusJSON, applied bool, err error) {
	decl, err := agent.LoadDeclaration(dir)
	if err != nil {
		return out, false, err
	}
	if decl != nil {
		out.Machine, out.Generation, out.MeshNames, out.Containers = decl.Machine, decl.Generation, string(decl.MeshNames), len(decl.Containers)
		// The roster in force is the resolver's: a NATS roster change
		// moves it without saving the declaration again.
		out.RosterGeneration = decl.Roster.Generation
		out.Resolver = &livenessJSON{}
		if gen, err := agent.ServedGeneration(ctx, dir); err != nil {
			fmt.Fprintf(env.stderr, "meshhost status: the roster shown is the one saved with the declaration: %v\n", err)
			out.Resolver.Error = err.Error()
		} else {
			out.Resolver.Running, out.Resolver.Generation = true, gen
			if gen != 0 {
				out.RosterGeneration = gen
			}
		}
	}
	if pid, running, err := dir.AgentRunning(); err != nil {
		out.Agent.Error = err.Error()
	} else {
		out.Agent.Running, out.Agent.PID = running, pid
	}
	if out.LastPass, err = lastPass(dir); err != nil {
		fmt.Fprintf(env.stderr, "meshhost status: %v\n", err)
	}
	st, err := agent.LoadStatus(dir)
	if err != nil {
		return out, false, err
	}
	out.HoldAbove = agent.DefaultHoldAbove
	if st != nil {
		out.AgentStatus = true
		out.HoldAbove = st.HoldAbove
		// A hold of an older declaration is the last pass's, not the
		// saved declaration's (the agent has not judged it yet).
		if st.Held != nil && st.Held.Generation == out.Generation {
			out.Held = st.Held
		}
	}
	out.Approved = agent.ApprovedDeclaration(dir)
	if out.RosterHeld, err = agent.LoadRosterHold(dir); err != nil {
		fmt.Fprintf(env.stderr, "meshhost status: %v\n", err)
	}
	if out.SetAside, err = dir.SetAside(); err != nil {
		fmt.Fprintf(env.stderr, "meshhost status: %v\n", err)
	}
	if out.Frozen, err = agent.Frozen(dir); err != nil {
		fmt.Fprintf(env.stderr, "meshhost status: %v\n", err)
	}
	if _, err := os.Stat(dir.Migrations()); err == nil {
		gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: out.Machine})
		if err != nil {
			return out, false, err
		}
		ms := gate.State()
		out.Migration = &migrationJSON{Flag: string(ms.Flag), Paused: ms.Paused}
		if out.Migration.Flag == "" {
			out.Migration.Flag = string(spec.FlagOff)
		}
		for _, name := range slices.Sorted(maps.Keys(ms.Networks)) {
			n := ms.Networks[name]
			nj := networkJSON{Name: name, Kind: string(n.Kind), Present: n.Present, Mode: "copy", LastProbe: "none", Failures: n.Failures}
			if n.Resolve {
				nj.Mode = "resolve"
			}
			if n.Last != nil {
				nj.LastProbe = "failed"
				if n.Last.Pass {
					nj.LastProbe = "passed"
				}
			}
			out.Migration.Networks = append(out.Migration.Networks, nj)
		}
	}
	if out.Held.Held() && out.Approved != out.Held.Generation {
		out.Releases = append(out.Releases, releaseJSON{journal.HoldDeclaration, fmt.Sprintf("meshhost approve %d", out.Held.Generation)})
	}
	if h := out.RosterHeld; h != nil {
		out.Releases = append(out.Releases, releaseJSON{journal.HoldRoster, fmt.Sprintf("meshhost roster accept %d", h.Newest)})
	}
	if out.Frozen != nil {
		out.Releases = append(out.Releases, releaseJSON{journal.HoldFrozen, "meshhost unfreeze"})
	}
	return out, decl != nil, nil
}

// lastPass returns the newest pass of dir's journal, nil when none (or
// no journal).
func lastPass(dir statedir.Dir) (*lastPassJSON, error) {
	if _, err := os.Stat(dir.Journal()); err != nil {
		return nil, nil
	}
	j, err := journal.Open(dir.Journal(), journal.Options{})
	if err != nil {
		return nil, err
	}
	passes, err := j.Passes()
	if err != nil || len(passes) == 0 {
		return nil, err
	}
	p := passes[len(passes)-1]
	lp := &lastPassJSON{Seq: p.Seq, Time: p.Time.UTC(), Generation: p.Generation, Result: "ok"}
	lp.Summary = p.Summary()
	for _, a := range p.Actions {
		v := actionView{a.Kind, a.Container, a.Reason, a.ID, a.NewID, a.Deferred, a.Frozen, a.Err, a.Duration.Seconds()}
		switch {
		case a.Err != "":
			lp.Failed = append(lp.Failed, v)
		case a.Deferred:
			lp.Deferred = append(lp.Deferred, v)
		}
	}
	for _, h := range p.Holds {
		switch h.Kind {
		case journal.HoldFrozen:
			lp.Result = "frozen"
		case journal.HoldDeclaration:
			if lp.Result != "frozen" {
				lp.Result = "held"
			}
		}
	}
	switch {
	case lp.Result != "ok":
	case len(lp.Failed) > 0:
		lp.Result = "failed"
	case len(lp.Deferred) > 0:
		lp.Result = "deferred"
	}
	return lp, nil
}

// printStatus prints status as text.
func printStatus(w io.Writer, dir statedir.Dir, out *statusJSON, applied bool) {
	if !applied {
		fmt.Fprintf(w, "no declaration applied yet in %s\n", dir.Path())
	} else {
		fmt.Fprintf(w, "machine %s: declaration %d (%d containers, mesh_names %s), roster %d\n", out.Machine, out.Generation, out.Containers, out.MeshNames, out.RosterGeneration)
	}
	switch {
	case out.Held.Held() && out.Approved == out.Held.Generation:
		// Approved since the agent's last pass: it goes ahead at the next.
		fmt.Fprintf(w, "APPROVED: declaration %d (held for replacing and removing more than --hold-above %d) goes ahead at the agent's next pass, paced by the replacement budget", out.Held.Generation, out.Held.HoldAbove)
		if out.Frozen != nil {
			fmt.Fprint(w, ", once unfrozen (meshhost unfreeze)")
		}
		fmt.Fprintln(w)
	case out.Held.Held():
		fmt.Fprintf(w, "HELD: %s\n", out.Held)
		for _, r := range out.Held.Replacements {
			fmt.Fprintf(w, "  replace %s: %s\n", r.Container, r.Reason)
		}
		for _, r := range out.Held.Removals {
			fmt.Fprintf(w, "  remove %s: %s\n", r.Container, r.Reason)
		}
	case out.Held != nil:
		fmt.Fprintf(w, "%s\n", out.Held)
	case out.HoldAbove == 0:
		fmt.Fprintln(w, "blast-radius hold: off (--hold-above 0)")
	default:
		fmt.Fprintf(w, "blast-radius hold: a declaration replacing and removing more than %d containers waits for meshhost approve\n", out.HoldAbove)
	}
	if h := out.RosterHeld; h != nil {
		fmt.Fprintf(w, "ROSTER HELD: the change from roster generation %d to %d drops too many names; roster %d keeps serving (meshhost roster diff %d %d shows it; meshhost roster accept %d releases it)\n",
			h.Served, h.Newest, h.Served, h.Served, h.Newest, h.Newest)
	}
	for _, f := range out.SetAside {
		fmt.Fprintf(w, "DAMAGED LOG set aside: %s (a record before its last was damaged; the records before it are served; look at it, then remove it)\n", f)
	}
	if out.Frozen != nil {
		fmt.Fprintf(w, "FROZEN since %s", out.Frozen.Since.UTC().Format(time.RFC3339))
		if out.Frozen.Reason != "" {
			fmt.Fprintf(w, " (%s)", out.Frozen.Reason)
		}
		fmt.Fprintln(w, ": no container is created, replaced or removed until meshhost unfreeze; DNS keeps serving")
	}
	if m := out.Migration; m != nil {
		paused := ""
		if m.Paused {
			paused = " (paused)"
		}
		fmt.Fprintf(w, "migration flag: %s%s\n", m.Flag, paused)
	}
	for _, n := range out.Migration.networks() {
		probe := "last probe " + n.LastProbe
		if n.Failures > 0 {
			probe += fmt.Sprintf(", %d failures in a row", n.Failures)
		}
		absent := ""
		if !n.Present {
			absent = " (not seen at the last observation)"
		}
		fmt.Fprintf(w, "  network %s (%s): %s mode, %s%s\n", n.Name, n.Kind, n.Mode, probe, absent)
	}
	if p := out.LastPass; p != nil {
		fmt.Fprintf(w, "last pass recorded: %d at %s, %s: %s\n", p.Seq, p.Time.Format(time.RFC3339), p.Result, p.Summary)
		for _, a := range p.Deferred {
			fmt.Fprintf(w, "  deferred %s %s: %s\n", a.Kind, a.Container, a.Reason)
		}
		for _, a := range p.Failed {
			fmt.Fprintf(w, "  failed %s %s: %s\n", a.Kind, a.Container, a.Error)
		}
	}
	switch a := out.Agent; {
	case a.Error != "":
		fmt.Fprintf(w, "agent: %s\n", a.Error)
	case a.Running:
		fmt.Fprintf(w, "agent: running (pid %d)\n", a.PID)
	default:
		fmt.Fprintf(w, "agent: NOT RUNNING (no process holds %s)\n", dir.AgentLock())
	}
	if r := out.Resolver; r != nil {
		if r.Running {
			fmt.Fprintf(w, "resolver: answering, roster %d\n", r.Generation)
		} else {
			fmt.Fprintf(w, "resolver: NOT ANSWERING: %s\n", r.Error)
		}
	}
	if !out.AgentStatus {
		fmt.Fprintln(w, "(the agent has written no status here yet)")
	}
}

// networks returns m's networks, none for a nil m.
func (m *migrationJSON) networks() []networkJSON {
	if m == nil {
		return nil
	}
	return m.Networks
}

func defineApprove(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	state := fs.String("state", statedir.Default, "the agent's state directory")
	return func(ctx context.Context, pos []string) (int, error) {
		if len(pos) != 1 {
			return exitUsage, errors.New("name one declaration generation")
		}
		gen, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil || gen == 0 {
			return exitUsage, fmt.Errorf("approve takes a declaration generation, not %q", pos[0])
		}
		dir, err := existingState(*state)
		if err != nil {
			return 1, err
		}
		// Only the declaration held may be approved: an approval of any
		// other generation would wait for it, and let a future push of
		// that generation skip the hold unseen.
		st, err := agent.LoadStatus(dir)
		if err != nil {
			return 1, err
		}
		var held uint64
		nothing := fmt.Sprintf("the agent has written no status in %s yet, so nothing is (meshhost status)", dir.Path())
		if st != nil {
			inForce := ""
			if d, err := agent.LoadDeclaration(dir); err == nil && d != nil {
				inForce = fmt.Sprintf("declaration %d is in force; ", d.Generation)
			}
			nothing = fmt.Sprintf("nothing is (%smeshhost status)", inForce)
			if st.Held != nil {
				held = st.Held.Generation
			}
		}
		if err := admit.Approve(gen, held, nothing).Err(); err != nil {
			return 1, err
		}
		if err := agent.ApproveDeclaration(dir, gen); err != nil {
			return 1, err
		}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(map[string]uint64{"approved": gen})
		}
		fmt.Fprintf(env.stdout, "declaration %d approved: the agent applies it on its next pass, paced by the replacement budget\n", gen)
		return 0, nil
	}
}

func defineFreeze(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	state := fs.String("state", statedir.Default, "the agent's state directory")
	reason := fs.String("reason", "", "why, for whoever finds the machine frozen (meshhost status, the agent's log)")
	return func(ctx context.Context, args []string) (int, error) {
		dir, err := existingState(*state)
		if err != nil {
			return 1, err
		}
		f := &agent.Freeze{Since: time.Now().UTC(), Reason: *reason}
		if cur, err := agent.Frozen(dir); err == nil && cur != nil {
			f.Since = cur.Since // frozen already: since then
			if *reason == "" {
				f.Reason = cur.Reason
			}
		}
		if err := agent.SetFrozen(dir, f); err != nil {
			return 1, err
		}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(map[string]*agent.Freeze{"frozen": f})
		}
		fmt.Fprintln(env.stdout, "frozen: no container is created, replaced or removed (the agent checks before every action) until meshhost unfreeze; the resolver keeps serving roster changes")
		return 0, nil
	}
}

func defineUnfreeze(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	state := fs.String("state", statedir.Default, "the agent's state directory")
	return func(ctx context.Context, args []string) (int, error) {
		dir, err := existingState(*state)
		if err != nil {
			return 1, err
		}
		if err := agent.SetFrozen(dir, nil); err != nil {
			return 1, err
		}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(map[string]*agent.Freeze{"frozen": nil})
		}
		fmt.Fprintln(env.stdout, "unfrozen: the agent's next pass applies the declaration in force (within the hold and the budget)")
		return 0, nil
	}
}

func defineRollback(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	state := fs.String("state", statedir.Default, "the agent's state directory")
	push := fs.String("push", "", "the agent's push endpoint: unix:/path.sock or a loopback ip:port (default unix:STATE/push.sock)")
	tokenFile := fs.String("push-token-file", "", "the agent's --push-token-file `FILE`: its token authenticates a TCP --push")
	return func(ctx context.Context, pos []string) (int, error) {
		if len(pos) != 1 {
			return exitUsage, errors.New("name one declaration generation")
		}
		gen, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil || gen == 0 {
			return exitUsage, fmt.Errorf("rollback takes a declaration generation, not %q", pos[0])
		}
		dir, err := existingState(*state)
		if err != nil {
			return 1, err
		}
		cur, err := agent.LoadDeclaration(dir)
		if err != nil {
			return 1, err
		}
		if cur == nil {
			return 1, fmt.Errorf("no declaration in force in %s: nothing to roll back from", dir.Path())
		}
		j, err := journal.Open(dir.Journal(), journal.Options{})
		if err != nil {
			return 1, err
		}
		old, err := j.Declaration(gen)
		if err != nil {
			return 1, fmt.Errorf("%w (meshhost history lists the declarations the journal holds)", err)
		}
		next, err := rollbackOf(old, cur, j)
		if err != nil {
			return 1, err
		}
		doc, err := next.MarshalJSON()
		if err != nil {
			return 1, err
		}
		addr := *push
		if addr == "" {
			addr = "unix:" + dir.PushSocket()
		}
		if err := pushTo(ctx, addr, *tokenFile, doc); err != nil {
			return 1, err
		}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(struct {
				Generation       uint64 `json:"generation"`
				From             uint64 `json:"from"`
				RosterGeneration uint64 `json:"roster_generation"`
			}{next.Generation, gen, next.Roster.Generation})
		}
		fmt.Fprintf(env.stdout, "declaration %d pushed: the containers and mesh_names of declaration %d, with roster %d in force; the agent applies it through the same plan, hold and budget (meshhost status shows a hold)\n",
			next.Generation, gen, next.Roster.Generation)
		fmt.Fprintf(env.stdout, "the controller's roster keeps moving under it; the controller's next declaration supersedes it once its generation is above %d\n", next.Generation)
		return 0, nil
	}
}

// rollbackOf returns old re-issued after cur: its containers and migration
// flag, cur's roster (a roster never goes back: names would return to old
// addresses), and a generation newer than cur and every one journaled.
func rollbackOf(old, cur *spec.Declaration, j *journal.Journal) (*spec.Declaration, error) {
	entries, err := j.Declarations()
	if err != nil {
		return nil, err
	}
	var newest uint64
	for _, e := range entries {
		newest = max(newest, e.Generation)
	}
	next, dec := admit.Rollback(old, cur, newest)
	return next, dec.Err()
}

// pushTo PUTs a declaration document to the agent's push endpoint at addr
// (unix:/path or a loopback ip:port, authenticated with the token in
// tokenFile), and returns the agent's refusal, with its faults, as an error.
func pushTo(ctx context.Context, addr, tokenFile string, doc []byte) error {
	token, err := pushToken(addr, tokenFile)
	if err != nil {
		return err
	}
	client, base := &http.Client{Timeout: time.Minute}, "http://"+addr
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		client.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}
		base = "http://meshhost"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/declaration", bytes.NewReader(doc))
	if err != nil {
		return err
	}
	if token != nil {
		req.Header.Set("Authorization", "Bearer "+string(token))
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("pushing to the agent at %s (is it running, with its push endpoint on?): %w", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var refusal struct {
		Faults []struct{ Path, Reason string } `json:"faults"`
	}
	var lines []string
	if json.Unmarshal(body, &refusal) == nil {
		for _, f := range refusal.Faults {
			lines = append(lines, (&spec.FieldError{Path: f.Path, Reason: f.Reason}).Error())
		}
	}
	if len(lines) == 0 {
		lines = append(lines, strings.TrimSpace(string(body)))
	}
	return fmt.Errorf("the agent refused the declaration (%s):\n  %s", resp.Status, strings.Join(lines, "\n  "))
}
