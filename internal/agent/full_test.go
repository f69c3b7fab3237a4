package agent

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/fullfs"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// Issue 7: a full state directory is a clear error and corrupts nothing.
// These tests put the agent's state on real full file systems (small tmpfs
// mounts; root only, skipped otherwise, failed under CI=true) and drive the
// agent in-process on the in-memory runtime.

// stateDirs says where each state writer writes: the agent's saved
// declaration, the resolver's saved roster, the migration gate's state and
// the journal. The agent command keeps them all in one directory; the
// tests can put each on a file system of its own, to fill one at a time.
type stateDirs struct{ state, roster, gate, journal string }

type fullFixture struct {
	*fixture
	dirs stateDirs
	dns  netip.AddrPort
	logs *syncbuf.Buffer
}

// newFullFixture is newFixture (a passed probe on record, so flag on is
// resolve mode) with its state where dirs say, a journal, a logger, and
// the resolver listening on loopback.
func newFullFixture(t *testing.T, dirs stateDirs) *fullFixture {
	t.Helper()
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	srv, err := resolver.New(resolver.Config{
		StatePath: statedir.New(dirs.roster).Roster(), Logger: logger,
		Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Listen(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: statedir.New(dirs.gate).Migrations(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	nets, _ := oneBridge{}.Networks(context.Background())
	if _, err := gate.Observe(nets); err != nil {
		t.Fatal(err)
	}
	err = gate.Record([]migrations.Result{{Network: "podman", Kind: migrations.KindBridge, Pass: true, At: time.Now(),
		Strategy: migrations.StrategyGateway,
		DNS:      spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Search: []string{"internal"}, Options: []string{"ndots:1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Segments of one entry (Keep 4): each entry is a file of its own, so
	// that on a full disk every journal write fails. With longer segments
	// an entry that fits in the last page of its segment is written, full
	// disk or not; the journal's TestJournalOnFullDisk has the appends
	// that do not fit.
	jnl, err := journal.Open(dirs.journal, journal.Options{Keep: 4})
	if err != nil {
		t.Fatal(err)
	}
	rt := memory.New(memory.Options{})
	rec, err := reconcile.New(reconcile.Config{Runtime: rt, Owner: "ace", Budget: reconcile.Budget{Max: 1 << 30, Window: time.Minute},
		Concurrency: 8, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	source := declsource.New(declsource.Config{Machine: "ace"})
	a, err := New(Config{Runtime: rt, Reconciler: rec, Resolver: srv, Gate: gate, Source: source, Networks: oneBridge{},
		State: statedir.New(dirs.state), Journal: jnl, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return &fullFixture{fixture: &fixture{a, rt, source, srv, dirs.state}, dirs: dirs, dns: srv.Listeners()[0], logs: logs}
}

// offer puts doc in force and runs a pass, returning its error.
func (f *fullFixture) offer(t *testing.T, doc []byte) error {
	t.Helper()
	if _, err := f.source.Offer(doc, "test"); err != nil {
		t.Fatal(err)
	}
	_, err := f.agent.Pass(context.Background())
	return err
}

// lookupA asks the fixture's resolver for name; "" when it does not
// resolve.
func (f *fullFixture) lookupA(name string) string {
	r, err := dnstest.Exchange(dns.NewMsg(name, dns.TypeA), "udp", f.dns.String(), 2*time.Second)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return ""
	}
	return r.Answer[0].(*dns.A).A.Addr.String()
}

// checkENOSPC checks that err is a full disk's, naming path.
func checkENOSPC(t *testing.T, what string, err error, path string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s on a full disk: no error", what)
	}
	t.Logf("%s on a full disk: %v", what, err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("%s: error %q is not ENOSPC", what, err)
	}
	for _, s := range append(want, path, "no space left on device") {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not say %q", what, err, s)
		}
	}
}

// checkIntact checks that the state files still parse as what generation
// gen left, and that no temporary file is left under dirs.
func checkIntact(t *testing.T, d stateDirs, gen uint64) {
	t.Helper()
	decl, err := LoadDeclaration(statedir.New(d.state))
	if err != nil || decl == nil || decl.Generation != gen {
		t.Errorf("saved declaration: %v, %v; want generation %d", decl, err, gen)
	}
	srv, err := resolver.New(resolver.Config{StatePath: statedir.New(d.roster).Roster()})
	if err != nil {
		t.Errorf("a resolver restarted on the saved roster: %v", err)
	} else {
		if r := srv.Roster(); r == nil || r.Generation != gen {
			t.Errorf("a resolver restarted on the saved roster serves %v; want generation %d", r, gen)
		}
		srv.Close()
	}
	if _, err := migrations.LoadState(statedir.New(d.gate).Migrations()); err != nil {
		t.Errorf("migration state: %v", err)
	}
	j, err := journal.Open(d.journal, journal.Options{})
	if err != nil {
		t.Errorf("journal: %v", err)
	} else if decls, err := j.Declarations(); err != nil || len(decls) == 0 || decls[len(decls)-1].Generation != gen {
		t.Errorf("journal declarations: %d, %v; want the last to be generation %d", len(decls), err, gen)
	} else if _, err := j.History(); err != nil {
		t.Errorf("journal history: %v", err)
	}
	for _, dir := range []string{d.state, d.roster, d.gate, d.journal} {
		if tmps := fullfs.TempFiles(t, dir); len(tmps) != 0 {
			t.Errorf("temporary files left behind: %v", tmps)
		}
	}
}

// TestFullStateDir: the agent's state directory (declaration, roster,
// migration state, journal: everything in one place, as the agent command
// keeps it) fills up. Passes with nothing new to save still succeed; a new
// declaration fails its pass with an error naming the declaration file and
// "no space left on device", and touches nothing: the machine stays as it
// is, the resolver keeps answering the roster in force, every state file
// is byte for byte what it was and parses, no temporary file is left. Once
// space is back the next pass applies the declaration.
func TestFullStateDir(t *testing.T) {
	dir := fullfs.Mount(t, 1<<20)
	d := stateDirs{state: dir, roster: dir, gate: dir, journal: filepath.Join(dir, "journal")}
	f := newFullFixture(t, d)
	if err := f.offer(t, declaration(1, spec.FlagOn, 3, 20)); err != nil {
		t.Fatal(err)
	}
	before, files := ids(f.rt), fullfs.Snapshot(t, dir)
	if f.lookupA("svc3.node3.internal.") != "10.64.0.3" {
		t.Fatal("the resolver does not answer roster 1")
	}
	fullfs.Fill(t, dir, 0)
	t.Logf("state directory full: %d bytes free", fullfs.Free(t, dir))

	// Nothing new: nothing to write, so nothing fails.
	for range 2 {
		if _, err := f.agent.Pass(context.Background()); err != nil {
			t.Errorf("a pass with nothing new on a full disk: %v", err)
		}
	}
	// A new declaration cannot be saved: refused whole, every pass.
	doc := declaration(2, spec.FlagOn, 4, 21)
	for i := range 2 {
		var err error
		if i == 0 {
			err = f.offer(t, doc)
		} else {
			_, err = f.agent.Pass(context.Background())
		}
		checkENOSPC(t, "a pass with a new declaration", err, statedir.New(dir).Declaration(), "saving the applied declaration")
		checkENOSPC(t, "Health", f.agent.Health(), statedir.New(dir).Declaration())
	}
	if after := ids(f.rt); !maps.Equal(after, before) {
		t.Errorf("the machine changed on a full disk: %v -> %v", before, after)
	}
	if got := f.lookupA("svc3.node3.internal."); got != "10.64.0.3" {
		t.Errorf("on a full disk the resolver answers svc3.node3.internal with %q, want 10.64.0.3", got)
	}
	if got := f.lookupA("svc20.node20.internal."); got != "" {
		t.Errorf("the unsaved declaration's new name resolves to %q", got)
	}
	if now := fullfs.Snapshot(t, dir); !maps.Equal(now, files) {
		for p := range maps.Keys(now) {
			if now[p] != files[p] {
				t.Errorf("%s changed on a full disk", p)
			}
		}
		t.Errorf("state files before: %d, after: %d", len(files), len(now))
	}
	checkIntact(t, d, 1)

	// Space is back: the next pass applies generation 2.
	if err := os.Remove(filepath.Join(dir, fullfs.FillerName)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.agent.Pass(context.Background()); err != nil {
		t.Fatalf("the pass after space came back: %v", err)
	}
	if got := f.lookupA("svc20.node20.internal."); got != "10.64.0.20" {
		t.Errorf("after space came back svc20.node20.internal resolves to %q, want 10.64.0.20", got)
	}
	if len(ids(f.rt)) != 4 || f.agent.Health() != nil {
		t.Errorf("after space came back: %d containers, health %v; want 4 and healthy", len(ids(f.rt)), f.agent.Health())
	}
	checkIntact(t, d, 2)
}

// TestFullDiskPerStateWriter fills the file system of one state writer at a
// time while the others have room, and checks each writer's failure: a
// clear error naming its file and ENOSPC, its previous content intact, no
// temporary file, and the agent still serving.
func TestFullDiskPerStateWriter(t *testing.T) {
	// mounts gives each writer a file system of its own.
	mounts := func(t *testing.T) stateDirs {
		return stateDirs{
			state: fullfs.Mount(t, 1<<20), roster: fullfs.Mount(t, 256<<10),
			gate: fullfs.Mount(t, 256<<10), journal: fullfs.Mount(t, 1<<20),
		}
	}

	// The resolver serves a roster it cannot save. The agent goes on with
	// it (the resolver serves it), fails that pass with the resolver's
	// error, and the next passes succeed: they do not offer the resolver
	// the same roster again.
	t.Run("saved roster", func(t *testing.T) {
		d := mounts(t)
		f := newFullFixture(t, d)
		if err := f.offer(t, declaration(1, spec.FlagOn, 2, 20)); err != nil {
			t.Fatal(err)
		}
		saved := fullfs.Snapshot(t, d.roster)
		fullfs.Fill(t, d.roster, 0)
		err := f.offer(t, declaration(2, spec.FlagOn, 2, 21))
		checkENOSPC(t, "a pass with a new roster", err, statedir.New(d.roster).Roster(), "served but not saved")
		if got := f.lookupA("svc20.node20.internal."); got != "10.64.0.20" {
			t.Errorf("the roster served but not saved: svc20.node20.internal resolves to %q, want 10.64.0.20", got)
		}
		if now := fullfs.Snapshot(t, d.roster); !maps.Equal(now, saved) {
			t.Error("the saved roster changed on a full disk")
		}
		if tmps := fullfs.TempFiles(t, d.roster); len(tmps) != 0 {
			t.Errorf("temporary files left behind: %v", tmps)
		}
		for i := range 3 {
			if _, err := f.agent.Pass(context.Background()); err != nil {
				t.Errorf("pass %d after the roster was served but not saved: %v", i+1, err)
			}
		}
		if !strings.Contains(f.logs.String(), "roster in force but not saved") {
			t.Error("the agent did not log the roster in force but not saved")
		}
		// Space is back: the next roster is saved.
		os.Remove(filepath.Join(d.roster, fullfs.FillerName))
		if err := f.offer(t, declaration(3, spec.FlagOn, 2, 22)); err != nil {
			t.Fatal(err)
		}
		checkIntact(t, d, 3)
	})

	// The migration state cannot take the flag's change: the pass fails
	// before the gate or the reconciler acts, and every container keeps its
	// mode.
	t.Run("migration state", func(t *testing.T) {
		d := mounts(t)
		f := newFullFixture(t, d)
		if err := f.offer(t, declaration(1, spec.FlagOn, 3, 20)); err != nil {
			t.Fatal(err)
		}
		before, saved := ids(f.rt), fullfs.Snapshot(t, d.gate)
		fullfs.Fill(t, d.gate, 0)
		err := f.offer(t, declaration(2, spec.FlagOff, 3, 20)) // the rollback: every container back to copy
		checkENOSPC(t, "a pass turning the flag off", err, statedir.New(d.gate).Migrations(), "setting the migration flag")
		if after := ids(f.rt); !maps.Equal(after, before) {
			t.Errorf("the machine changed while the flag could not be saved: %v -> %v", before, after)
		}
		if now := fullfs.Snapshot(t, d.gate); !maps.Equal(now, saved) {
			t.Error("the migration state changed on a full disk")
		}
		if st, err := migrations.LoadState(statedir.New(d.gate).Migrations()); err != nil || st.Flag != spec.FlagOn {
			t.Errorf("migration state after the failure: %v, %v; want flag on", st, err)
		}
		if tmps := fullfs.TempFiles(t, d.gate); len(tmps) != 0 {
			t.Errorf("temporary files left behind: %v", tmps)
		}
		if got := f.lookupA("svc3.node3.internal."); got != "10.64.0.3" {
			t.Errorf("the resolver answers svc3.node3.internal with %q, want 10.64.0.3", got)
		}
		os.Remove(filepath.Join(d.gate, fullfs.FillerName))
		rep, err := f.agent.Pass(context.Background())
		if err != nil {
			t.Fatalf("the pass after space came back: %v", err)
		}
		if rep.Modes["app0"] != string(spec.Copy) {
			t.Errorf("after space came back app0 is in %q mode, want copy", rep.Modes["app0"])
		}
		checkIntact(t, d, 2)
	})

	// The journal is history: a full journal is logged (naming the entry
	// and ENOSPC) and the pass goes on; the entries it holds stay whole.
	t.Run("journal", func(t *testing.T) {
		d := mounts(t)
		f := newFullFixture(t, d)
		if err := f.offer(t, declaration(1, spec.FlagOn, 2, 20)); err != nil {
			t.Fatal(err)
		}
		saved := fullfs.Snapshot(t, d.journal)
		fullfs.Fill(t, d.journal, 0)
		if err := f.offer(t, declaration(2, spec.FlagOn, 3, 20)); err != nil { // creates app2: a pass entry
			t.Fatalf("a pass with a full journal: %v", err)
		}
		if len(ids(f.rt)) != 3 {
			t.Errorf("with a full journal the pass did not create app2: %v", ids(f.rt))
		}
		logs := f.logs.String()
		for _, want := range []string{"recording the declaration in the journal", "recording the pass in the journal"} {
			var line string
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, want) {
					line = l
				}
			}
			if !strings.Contains(line, d.journal) || !strings.Contains(line, "no space left on device") {
				t.Errorf("log line %q: want %q naming the entry under %s and \"no space left on device\"", line, want, d.journal)
			}
		}
		if now := fullfs.Snapshot(t, d.journal); !maps.Equal(now, saved) {
			t.Error("the journal's entries changed on a full disk")
		}
		j, err := journal.Open(d.journal, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if decls, err := j.Declarations(); err != nil || len(decls) != 1 || decls[0].Generation != 1 {
			t.Errorf("journal declarations: %v, %v; want generation 1 only", decls, err)
		}
		if _, err := j.History(); err != nil {
			t.Errorf("journal history: %v", err)
		}
		if tmps := fullfs.TempFiles(t, d.journal); len(tmps) != 0 {
			t.Errorf("temporary files left behind: %v", tmps)
		}
		if decl, err := LoadDeclaration(statedir.New(d.state)); err != nil || decl.Generation != 2 {
			t.Errorf("saved declaration: %v, %v; want generation 2", decl, err)
		}
	})
}
