package control

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/testkit/continuity"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

var cmpNetip = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

func roster(gen uint64, addr string) *spec.Roster {
	return &spec.Roster{
		Generation: gen,
		Zones:      []string{"internal"},
		Names:      map[string][]netip.Addr{"gitea.novox.internal": {netip.MustParseAddr(addr)}},
	}
}

// newResolver returns a resolver that keeps its roster in dir and never
// forwards off loopback, and never refuses an address (no podman here).
func newResolver(t testing.TB, dir string) *resolver.Server {
	t.Helper()
	rc := filepath.Join(dir, "resolv.conf")
	os.WriteFile(rc, nil, 0o644)
	srv, err := resolver.New(resolver.Config{
		ResolvConf: rc, StatePath: filepath.Join(dir, "roster.json"),
		Forbidden: func(netip.AddrPort) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// serve runs a control Server for srv on a socket in dir and returns it
// and a Client of it.
func serve(t testing.TB, dir string, srv *resolver.Server, cfg Config) (*Server, *Client) {
	t.Helper()
	cfg.Resolver = srv
	if cfg.ExposurePath == "" {
		cfg.ExposurePath = filepath.Join(dir, "exposure.json")
	}
	cs, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs.Start()
	sock := filepath.Join(dir, "control.sock")
	l, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cs.Serve(l) }()
	t.Cleanup(func() {
		cs.Shutdown(t.Context())
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return cs, NewClient(ClientConfig{Path: sock, Timeout: 5 * time.Second})
}

func TestRosterGenerations(t *testing.T) {
	dir := t.TempDir()
	srv := newResolver(t, dir)
	_, c := serve(t, dir, srv, Config{})
	if c.Serving() {
		t.Error("Serving() before any roster = true")
	}
	if r, err := c.RosterContext(t.Context()); r != nil || err != nil {
		t.Errorf("RosterContext before any = %v, %v; want nil, nil", r, err)
	}
	if err := c.Update(roster(2, "10.89.0.7")); err != nil {
		t.Fatalf("Update(2) = %v", err)
	}
	for _, tc := range []struct {
		name string
		r    *spec.Roster
		want string
	}{
		{"same generation", roster(2, "10.89.0.8"), "not newer"},
		{"older generation", roster(1, "10.89.0.8"), "not newer"},
		{"invalid", &spec.Roster{Generation: 3, Names: map[string][]netip.Addr{"bad_name.internal": {netip.MustParseAddr("10.0.0.1")}}}, "HTTP 422"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Update(tc.r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Update = %v, want an error with %q", err, tc.want)
			}
			if tc.want == "not newer" && !errors.Is(err, resolver.ErrStaleGeneration) {
				t.Errorf("Update = %v, want it to wrap resolver.ErrStaleGeneration", err)
			}
		})
	}
	got := c.Roster()
	if diff := cmp.Diff(roster(2, "10.89.0.7").Normalize(), got.Normalize(), cmpNetip); diff != "" {
		t.Errorf("Roster() -want +got:\n%s", diff)
	}
	if !c.Serving() {
		t.Error("Serving() = false with a roster")
	}
	// The roster was saved: a new resolver serves it from its start.
	if g := newResolver(t, dir).Generation(); g != 2 {
		t.Errorf("a restarted resolver serves generation %d, want 2", g)
	}
}

func freeAddrs(t *testing.T, n int) []netip.AddrPort {
	var out []netip.AddrPort
	for range n {
		out = append(out, dnstest.FreePort(t))
	}
	slices.SortFunc(out, netip.AddrPort.Compare) // as the resolver lists them
	return out
}

// TestExposureSurvivesRestart: what the agent exposed is served again by a
// resolver started afresh on the same state, before anyone feeds it, from
// its first query.
func TestExposureSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	srv := newResolver(t, dir)
	_, c := serve(t, dir, srv, Config{})
	if err := c.Update(roster(1, "10.89.0.7")); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if err := c.Listen(a); err != nil {
			t.Fatalf("Listen(%s) = %v", a, err)
		}
	}
	c.SetAllow([]netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")})
	c.SetLocalForward(netip.MustParsePrefix("10.89.1.0/24"), "dns.podman", netip.MustParseAddrPort("10.89.1.1:53"))
	if diff := cmp.Diff(addrs, srv.Listeners(), cmpNetip); diff != "" {
		t.Fatalf("resolver listeners -want +got:\n%s", diff)
	}
	want := c.Exposure()
	srv.Close() // the whole resolver goes: a reboot

	srv2 := newResolver(t, dir)
	cs2, err := NewServer(Config{Resolver: srv2, ExposurePath: filepath.Join(dir, "exposure.json")})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, cs2.Exposure(), cmpNetip); diff != "" {
		t.Errorf("saved exposure -want +got:\n%s", diff)
	}
	if res := cs2.Start(); len(res.Failed) > 0 {
		t.Fatalf("Start failed: %v", res.Failed)
	}
	for _, a := range addrs {
		r, err := dnstest.Exchange(dns.NewMsg("gitea.novox.internal.", dns.TypeA), "udp", a.String(), 2*time.Second)
		if err != nil {
			t.Fatalf("first query to %s after the restart: %v", a, err)
		}
		if err := continuity.CheckA(r, netip.MustParseAddr("10.89.0.7")); err != nil {
			t.Errorf("first query to %s after the restart: %v", a, err)
		}
	}
}

// TestClientKeepsInheritedUntilSettle: a restarted agent (a new Client)
// asserting the exposure one network at a time never takes away, in
// between, what the previous agent exposed; Settle drops what it did not
// assert again.
func TestClientKeepsInheritedUntilSettle(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 3)
	a, b, gone := addrs[0], addrs[1], addrs[2]
	pa, pb, pgone := netip.MustParsePrefix("10.88.0.0/16"), netip.MustParsePrefix("10.89.0.0/24"), netip.MustParsePrefix("10.90.0.0/24")
	srv := newResolver(t, dir)
	cs, first := serve(t, dir, srv, Config{})
	for _, x := range []netip.AddrPort{a, b, gone} {
		if err := first.Listen(x); err != nil {
			t.Fatal(err)
		}
	}
	first.SetAllow([]netip.Prefix{pa, pb, pgone})
	first.SetLocalForward(pgone, "dns.podman", netip.MustParseAddrPort("10.90.0.1:53"))

	// The agent restarts: a new Client asserts network a only, so far.
	next := NewClient(ClientConfig{Path: first.Path()})
	if err := next.Listen(a); err != nil {
		t.Fatal(err)
	}
	next.SetAllow([]netip.Prefix{pa})
	got := cs.Exposure()
	if diff := cmp.Diff([]netip.AddrPort{a, b, gone}, got.Listen, cmpNetip); diff != "" {
		t.Errorf("before Settle, listen -want +got:\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Prefix{pa, pb, pgone}, got.Allow, cmpNetip); diff != "" {
		t.Errorf("before Settle, allow -want +got:\n%s", diff)
	}
	if len(got.Forwards) != 1 {
		t.Errorf("before Settle, forwards = %v, want the inherited one", got.Forwards)
	}
	if err := next.Listen(b); err != nil {
		t.Fatal(err)
	}
	next.SetAllow([]netip.Prefix{pa, pb})
	if err := next.Settle(); err != nil {
		t.Fatal(err)
	}
	got = cs.Exposure()
	want := Exposure{Listen: []netip.AddrPort{a, b}, Allow: []netip.Prefix{pa, pb}}.Normalize()
	if diff := cmp.Diff(want, got, cmpNetip); diff != "" {
		t.Errorf("after Settle -want +got:\n%s", diff)
	}
	if diff := cmp.Diff([]netip.AddrPort{a, b}, srv.Listeners(), cmpNetip); diff != "" {
		t.Errorf("after Settle, resolver listeners -want +got:\n%s", diff)
	}
}

// TestClientWhileResolverDown: a Client works without the resolver (it
// says why), and Sync puts what it was told once the resolver is back.
func TestClientWhileResolverDown(t *testing.T) {
	dir := t.TempDir()
	addr := dnstest.FreePort(t)
	c := NewClient(ClientConfig{Path: filepath.Join(dir, "control.sock"), Timeout: time.Second})
	if err := c.Listen(addr); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Listen with no resolver = %v, want ErrUnreachable", err)
	}
	if err := c.Update(roster(1, "10.89.0.7")); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Update with no resolver = %v, want ErrUnreachable", err)
	}
	if c.Serving() || c.Roster() != nil {
		t.Error("Serving or Roster with no resolver")
	}
	if !errors.Is(c.Err(), ErrUnreachable) {
		t.Errorf("Err() = %v, want ErrUnreachable", c.Err())
	}
	srv := newResolver(t, dir)
	serve(t, dir, srv, Config{})
	if err := c.Sync(); err != nil {
		t.Fatalf("Sync with the resolver up = %v", err)
	}
	if diff := cmp.Diff([]netip.AddrPort{addr}, srv.Listeners(), cmpNetip); diff != "" {
		t.Errorf("listeners after Sync -want +got:\n%s", diff)
	}
}

// TestStaticNeverRemoved: the resolver's own --listen addresses and
// client networks stay whatever the exposure says.
func TestStaticNeverRemoved(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	static, exposed := addrs[0], addrs[1]
	srv := newResolver(t, dir)
	if err := srv.Listen(static); err != nil {
		t.Fatal(err)
	}
	cs, c := serve(t, dir, srv, Config{Static: []netip.AddrPort{static}})
	if err := c.Listen(exposed); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Apply(Exposure{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]netip.AddrPort{static}, srv.Listeners(), cmpNetip); diff != "" {
		t.Errorf("listeners after an empty exposure -want +got:\n%s", diff)
	}
}

// TestRefusesOtherUsers: a peer whose uid is not admitted is hung up on.
func TestRefusesOtherUsers(t *testing.T) {
	dir := t.TempDir()
	srv := newResolver(t, dir)
	cs, err := NewServer(Config{Resolver: srv})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []uint32
	cs.allowed = func(uid uint32) bool { mu.Lock(); defer mu.Unlock(); asked = append(asked, uid); return false }
	sock := filepath.Join(dir, "control.sock")
	l, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	go cs.Serve(l)
	defer cs.Shutdown(t.Context())
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	c := NewClient(ClientConfig{Path: sock, Timeout: 2 * time.Second})
	if err := c.Update(roster(1, "10.89.0.7")); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Update from a refused uid = %v, want ErrUnreachable", err)
	}
	if err := c.Apply(&spec.RosterDelta{From: 0, To: 1, Set: map[string][]netip.Addr{"a.internal": {netip.MustParseAddr("10.0.0.1")}}}); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Apply from a refused uid = %v, want ErrUnreachable", err)
	}
	if srv.Generation() != 0 {
		t.Error("a refused peer's roster was applied")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 || int(asked[0]) != os.Geteuid() {
		t.Errorf("uids checked = %v, want this process's %d", asked, os.Geteuid())
	}
	if !cs.allowedUID(0) || !cs.allowedUID(uint32(os.Geteuid())) || cs.allowedUID(12345) {
		t.Error("allowedUID: want root and own uid admitted, uid 12345 refused")
	}
}

// TestWatch: Alive follows the resolver without blocking, and a put that
// failed while it was down is made good once it is back.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	addr := dnstest.FreePort(t)
	c := NewClient(ClientConfig{Path: filepath.Join(dir, "control.sock"), Timeout: time.Second})
	if _, err := c.Alive(); err == nil {
		t.Error("Alive before Watch = nil error")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go c.Watch(ctx, 20*time.Millisecond)
	waitFor(t, func() bool { _, err := c.Alive(); return errors.Is(err, ErrUnreachable) }, "Alive to say unreachable")
	c.Listen(addr) // fails: nobody there
	srv := newResolver(t, dir)
	serve(t, dir, srv, Config{})
	waitFor(t, func() bool { _, err := c.Alive(); return err == nil }, "Alive once the resolver is up")
	waitFor(t, func() bool { return len(srv.Listeners()) == 1 && c.Err() == nil }, "the failed put made good")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
