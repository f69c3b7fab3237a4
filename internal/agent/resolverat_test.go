package agent

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
)

// TestServedRosterWhereTheAgentReadsIt: an agent records in its state
// directory where its resolver is, and ServedRoster (what plan, explain
// and dns-check call) reads the roster in force there: the embedded
// resolver's saved roster with the deltas logged beside it, or the
// resolver service's over its control socket, whose roster is saved in
// another directory. A resolver service that does not answer, or no
// record, is an error, never "no roster".
func TestServedRosterWhereTheAgentReadsIt(t *testing.T) {
	ctx := context.Background()
	served := func(t *testing.T, dir statedir.Dir, at string) *spec.Roster {
		t.Helper()
		r, err := ServedRoster(ctx, dir, at)
		if err != nil {
			t.Fatalf("ServedRoster(%q): %v", at, err)
		}
		return r
	}

	t.Run("no record", func(t *testing.T) {
		dir := statedir.New(t.TempDir())
		if r, err := ServedRoster(ctx, dir, ""); err == nil || !strings.Contains(err.Error(), "does not say where the agent's resolver is") {
			t.Errorf("ServedRoster without a record = %v, %v; want an error saying so", r, err)
		}
		if gen, err := ServedGeneration(ctx, dir); err == nil || !strings.Contains(err.Error(), "does not say where the agent's resolver is") {
			t.Errorf("ServedGeneration without a record = %d, %v; want an error saying so", gen, err)
		}
	})

	t.Run("embedded", func(t *testing.T) {
		f := newFixture(t, true)
		dir := statedir.New(f.state)
		if at, err := ResolverAt(dir); at != EmbeddedResolver || err != nil {
			t.Fatalf("ResolverAt = %q, %v; want %q", at, err, EmbeddedResolver)
		}
		if r := served(t, dir, ""); r != nil {
			t.Errorf("before any roster: %v, want none", r)
		}
		f.push(t, declaration(1, spec.FlagOn, 1, 10))
		f.push(t, deltaDoc(2, 1, 2, map[string]string{"new.internal": "10.99.0.1"}, "svc3.node3.internal"))
		if _, err := os.Stat(resolver.LogPath(dir.Roster())); err != nil {
			t.Fatalf("the delta is not logged beside the roster: %v", err)
		}
		if diff := cmp.Diff(f.srv.Roster(), served(t, dir, ""), cmpRoster...); diff != "" {
			t.Errorf("ServedRoster (-resolver +read):\n%s", diff)
		}
		if gen, err := ServedGeneration(ctx, dir); gen != 2 || err != nil {
			t.Errorf("ServedGeneration = %d, %v; want 2", gen, err)
		}
	})

	t.Run("resolver service", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "resolver.sock")
		var svc controlService
		var srv *resolver.Server
		var stop func()
		f := newFixture(t, true, func(c *Config) {
			// The service's roster is saved in its own directory, not the
			// agent's.
			var err error
			srv, err = resolver.New(resolver.Config{StatePath: filepath.Join(t.TempDir(), "roster.json"), Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			stop = svc.serve(t, sock, srv)
			c.Resolver = control.NewClient(control.ClientConfig{Path: sock, Timeout: 5 * time.Second})
		})
		dir := statedir.New(f.state)
		if at, err := ResolverAt(dir); at != "unix:"+sock || err != nil {
			t.Fatalf("ResolverAt = %q, %v; want unix:%s", at, err, sock)
		}
		f.push(t, declaration(1, spec.FlagOn, 1, 10))
		if _, err := os.Stat(dir.Roster()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the agent's state directory has a roster.json (%v): the test would not tell the two apart", err)
		}
		if diff := cmp.Diff(srv.Roster(), served(t, dir, ""), cmpRoster...); diff != "" {
			t.Errorf("ServedRoster (-resolver +read):\n%s", diff)
		}
		if gen, err := ServedGeneration(ctx, dir); gen != 1 || err != nil {
			t.Errorf("ServedGeneration = %d, %v; want 1, the service's", gen, err)
		}
		if r := served(t, dir, EmbeddedResolver); r != nil {
			t.Errorf("ServedRoster(embedded) = generation %d; the agent's state directory holds none", r.Generation)
		}
		stop()
		if r, err := ServedRoster(ctx, dir, ""); !errors.Is(err, control.ErrUnreachable) {
			t.Errorf("ServedRoster with the service down = %v, %v; want an error wrapping ErrUnreachable", r, err)
		}
		if gen, err := ServedGeneration(ctx, dir); !errors.Is(err, control.ErrUnreachable) {
			t.Errorf("ServedGeneration with the service down = %d, %v; want an error wrapping ErrUnreachable", gen, err)
		}

		// The agent started again, embedded: the record follows.
		newFixture(t, true, func(c *Config) { c.State = dir })
		if at, err := ResolverAt(dir); at != EmbeddedResolver || err != nil {
			t.Errorf("after a start with an embedded resolver, ResolverAt = %q, %v", at, err)
		}
	})

	t.Run("unreadable record", func(t *testing.T) {
		dir := statedir.New(t.TempDir())
		if err := os.WriteFile(dir.Resolver(), []byte("tcp:127.0.0.1:1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := ServedRoster(ctx, dir, ""); err == nil || !strings.Contains(err.Error(), "want embedded or unix:PATH") {
			t.Errorf("ServedRoster with %q recorded = %v, %v", "tcp:127.0.0.1:1", r, err)
		}
	})
}
