package natssource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/spec"
)

// cluster is a three-node JetStream cluster of the test's own on
// loopback, as scripts/nats-cluster-up starts one.
type cluster struct {
	nodes    []*ownServer
	names    []string // server_name of each node
	monitors []int    // each node's monitoring port
}

func startCluster(t *testing.T) *cluster { return startClusterConf(t, "", "", nil) }

// replicatedPublisher connects to c as the controller does (reconnecting for
// as long as the test lasts, opts added) and makes l's buckets with three
// replicas: the connection, the publisher, and a context that ends after
// limit or with the test.
func replicatedPublisher(t *testing.T, c *cluster, l Layout, limit time.Duration, opts ...nats.Option) (*nats.Conn, *Publisher, context.Context) {
	t.Helper()
	nc, err := nats.Connect(c.URL(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := NewPublisher(nc, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	if err := p.EnsureReplicatedBuckets(ctx, 3); err != nil {
		t.Fatal(err)
	}
	return nc, p, ctx
}

// startClusterConf starts a cluster whose nodes' cluster blocks have
// more lines, and their configurations top; connect are the options the
// test's readiness check connects with.
func startClusterConf(t *testing.T, more, top string, connect []nats.Option) *cluster {
	t.Helper()
	bin := needNATS(t, "MESHHOST_NATS_SERVER")
	c := &cluster{}
	routes := make([]int, 3)
	for i := range routes {
		routes[i] = freePort(t)
	}
	var routeURLs []string
	for _, p := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	for i := range 3 {
		dir := t.TempDir()
		name := fmt.Sprintf("n%d", i+1)
		monitor := freePort(t)
		c.monitors = append(c.monitors, monitor)
		conf := fmt.Sprintf("server_name: %s\nhttp: 127.0.0.1:%d\ncluster {\n  name: meshhost-test\n  listen: 127.0.0.1:%d\n  routes: [%s]\n%s}\n",
			name, monitor, routes[i], strings.Join(routeURLs, ", "), more) + top
		path := filepath.Join(dir, "server.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &ownServer{t: t, bin: bin, dir: dir, port: freePort(t), extra: []string{"--config", path}, connect: connect}
		c.nodes = append(c.nodes, s)
		c.names = append(c.names, name)
		t.Cleanup(s.kill)
	}
	// Started together: none answers JetStream before a quorum is up.
	errs := make(chan error, 3)
	for _, s := range c.nodes {
		go func() { errs <- s.startE() }()
	}
	for range c.nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// URL is every node's URL, separated by commas (what the agent takes).
func (c *cluster) URL() string {
	var u []string
	for _, s := range c.nodes {
		u = append(u, s.URL())
	}
	return strings.Join(u, ",")
}

// leader returns the index of the node that leads stream.
func (c *cluster) leader(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		t.Fatalf("stream %s has no cluster info", stream)
	}
	if len(info.Cluster.Replicas)+1 != 3 {
		t.Fatalf("stream %s: leader %s and %d replicas, want 3 in all", stream, info.Cluster.Leader, len(info.Cluster.Replicas))
	}
	for i, n := range c.names {
		if n == info.Cluster.Leader {
			return i
		}
	}
	t.Fatalf("stream %s: leader %q is none of %v", stream, info.Cluster.Leader, c.names)
	return -1
}

// holding returns the index of the node a client connection named name
// is on (its connz), waiting for it.
func (c *cluster) holding(t *testing.T, name string) int { return c.holdingExcept(t, name, -1) }

// holdingExcept is holding, looking at every node but except.
func (c *cluster) holdingExcept(t *testing.T, name string, except int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, port := range c.monitors {
			if i == except {
				continue
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/connz", port))
			if err != nil {
				continue
			}
			var connz struct {
				Connections []struct {
					Name string `json:"name"`
				} `json:"connections"`
			}
			err = json.NewDecoder(resp.Body).Decode(&connz)
			resp.Body.Close()
			if err != nil {
				continue
			}
			for _, conn := range connz.Connections {
				if conn.Name == name {
					return i
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no node holds a connection named %q", name)
	return -1
}

// moveLeader makes node to the leader of stream: the leader steps down
// until the election falls on it.
func (c *cluster) moveLeader(t *testing.T, nc *nats.Conn, js jetstream.JetStream, stream string, to int) {
	t.Helper()
	for range 20 {
		cur := c.leader(t, js, stream)
		if cur == to {
			return
		}
		if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second); err != nil {
			t.Logf("stepping %s down: %v", stream, err)
		}
		waitFor(t, 20*time.Second, "a new leader of "+stream, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s, err := js.Stream(ctx, stream)
			return err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" && s.CachedInfo().Cluster.Leader != c.names[cur]
		})
	}
	t.Fatalf("%s did not come to lead %s in 20 elections", c.names[to], stream)
}

// publishUntilCommitted commits roster generation gen, whose names are
// want and whose change from the last one is d, retrying against
// whichever server leads now: a delta first; whole when a failed attempt
// left writes no commit covers (ErrNotClean) or the delta's base is
// unknown. An attempt whose acknowledgement was lost but that committed
// is told by ErrStale with gen committed.
func publishUntilCommitted(ctx context.Context, p *Publisher, gen uint64, want map[string][]netip.Addr, d Delta) (attempts int, err error) {
	whole := false
	for ctx.Err() == nil {
		attempts++
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var res Result
		if whole {
			res, err = p.PublishRoster(actx, &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: want})
		} else {
			d.Generation = gen
			res, err = p.PublishDelta(actx, d)
		}
		cancel()
		switch {
		case err == nil:
			return attempts, nil
		case errors.Is(err, ErrStale) && res.Previous >= gen:
			return attempts, nil // an earlier attempt committed it
		case errors.Is(err, ErrStale) && !whole:
			whole = true // a lost commit's CAS: compare whole
		case errors.Is(err, ErrNotClean):
			whole = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return attempts, fmt.Errorf("roster generation %d: %w (last: %v)", gen, ctx.Err(), err)
}

// TestClusterStreamLeaderKilled: on a three-node cluster with
// three-replica buckets, the roster stream's leader is killed (SIGKILL)
// while the controller commits a roster change every few milliseconds
// and an agent's watcher, given every node's URL, follows. Every roster
// the watcher applies is exactly the one committed under its generation
// (none partial), generations only rise (none reordered), and it ends on
// the last one committed (none lost), with the machine's declaration.
func TestClusterStreamLeaderKilled(t *testing.T) {
	c := startCluster(t)
	l := LayoutFor(DefaultPrefix)
	nc, p, ctx := replicatedPublisher(t, c, l, 3*time.Minute)
	rec := newRecorder(t)
	r := roster(200)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	decl := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 1, MeshNames: spec.FlagOff,
		Roster:     &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
		Containers: []spec.Container{{Name: "app", Image: "busybox"}}}
	if _, err := p.PublishDeclaration(ctx, decl); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w := startWatcher(t, Config{Server: Server{URL: c.URL(), Name: "watcher ace"}, Layout: l, Machine: "ace", Sink: rec, OnChange: rec.onChange, Patience: 5 * time.Second, Registerer: reg})
	waitFor(t, 30*time.Second, "the watcher reading generation 1", func() bool { return rec.last() == 1 })

	// The controller commits until 30 generations after the kill ...
	var committed, killedAt atomic.Uint64
	committed.Store(1)
	var final map[string][]netip.Addr
	var last uint64
	done := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(7, 25))
		cur := r
		for gen := uint64(2); ; gen++ {
			// ... and the watcher applied a commit after the kill while
			// the controller still commits.
			if k := killedAt.Load(); k > 0 && gen > k+30 && rec.last() > k+1 {
				break
			}
			next, d := change(rng, cur, 5, 400)
			rec.expect(gen, next)
			n, err := publishUntilCommitted(ctx, p, gen, next, d)
			if err != nil {
				done <- err
				return
			}
			if n > 1 {
				t.Logf("roster generation %d committed after %d attempts", gen, n)
			}
			cur = next
			committed.Store(gen)
			time.Sleep(20 * time.Millisecond)
		}
		final, last = cur, committed.Load()
		done <- nil
	}()

	waitFor(t, time.Minute, "the controller committing generation 20", func() bool { return committed.Load() >= 20 })
	select {
	case err := <-done:
		t.Fatalf("the controller stopped before the kill: %v", err)
	default:
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The node the watcher reads from leads the roster stream: its death
	// takes both the leader and the watcher's connection.
	leader := c.holding(t, "watcher ace")
	c.moveLeader(t, nc, js, "KV_"+l.Roster, leader)
	t.Logf("killing %s, the leader of KV_%s and the watcher's server, at generation %d", c.names[leader], l.Roster, committed.Load())
	c.nodes[leader].kill()
	killedAt.Store(max(committed.Load(), 1))
	if name, _ := w.Server(); name != c.names[leader] {
		t.Errorf("before the kill, Watcher.Server() = %q, want %q (connz)", name, c.names[leader])
	}
	if again := c.holding(t, "watcher ace"); again == leader {
		t.Fatalf("the watcher is on %s, which was killed", c.names[again])
	}

	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the watcher applying the last generation", func() bool { return rec.last() == last })
	// OnChange is told before the sink takes the roster.
	var got *spec.Declaration
	waitFor(t, 10*time.Second, "the sink taking the last generation", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		got = rec.decls[len(rec.decls)-1]
		return got.Roster.Generation == last
	})
	rec.check()
	if got.Roster.Generation != last || got.Generation != 1 {
		t.Errorf("the sink holds declaration %d with roster %d, want 1 with %d", got.Generation, got.Roster.Generation, last)
	}
	if diff := cmp.Diff(final, got.Roster.Names, addrCmp); diff != "" {
		t.Errorf("the sink's roster, generation %d, unlike the one committed (-committed +sink):\n%s", last, diff)
	}
	if err := w.Health(); err != nil {
		t.Errorf("Health after the leader's death = %v", err)
	}
	// Readiness and metrics name the server it reads from now, and say it
	// is caught up.
	now := c.names[c.holdingExcept(t, "watcher ace", leader)]
	if name, url := w.Server(); name != now || url != c.nodes[c.holdingExcept(t, "watcher ace", leader)].URL() {
		t.Errorf("Watcher.Server() = %q, %q; want %q, %q", name, url, now, c.nodes[c.holdingExcept(t, "watcher ace", leader)].URL())
	}
	live := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshhost_natssource_server_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "server" {
					live[lp.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if want := map[string]float64{now: 1}; !maps.Equal(live, want) {
		t.Errorf("meshhost_natssource_server_info by server = %v, want %v", live, want)
	}
	if b := gaugeValue(t, reg, "meshhost_natssource_behind_revisions"); b != 0 {
		t.Errorf("meshhost_natssource_behind_revisions = %v once caught up, want 0", b)
	}
	rec.mu.Lock()
	t.Logf("the watcher applied %d generations of %d (%d read whole); the leader was killed at generation %d", len(rec.gens), last, rec.full, killedAt.Load())
	rec.mu.Unlock()
}

// TestClusterPublishRetriesAgainstNewLeader: right after the roster
// stream's leader is killed, a publish through Retry (as meshhost publish
// does) commits once a new leader is elected, within seconds; a single
// attempt bounded only by the publish's whole timeout waited for all of
// it (no server answers a request to a stream without a leader).
func TestClusterPublishRetriesAgainstNewLeader(t *testing.T) {
	c := startCluster(t)
	l := LayoutFor(DefaultPrefix)
	nc, p, ctx := replicatedPublisher(t, c, l, 2*time.Minute)
	publishRoster(t, p, 1, roster(50))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for gen := uint64(2); gen <= 3; gen++ {
		leader := c.leader(t, js, "KV_"+l.Roster)
		c.nodes[leader].kill()
		start := time.Now()
		attempts := 0
		err := Retry(ctx, func(actx context.Context) error {
			attempts++
			_, err := p.PublishRoster(actx, &spec.Roster{Generation: gen, Zones: []string{"internal"}, Names: roster(50 + int(gen))})
			if err != nil {
				t.Logf("generation %d, attempt %d: %v (transient: %v)", gen, attempts, err, Transient(err))
			}
			return err
		})
		if err != nil {
			t.Fatalf("publishing generation %d after %s, the leader, died: %v", gen, c.names[leader], err)
		}
		t.Logf("generation %d committed %s after %s died, in %d attempts", gen, time.Since(start).Round(time.Millisecond), c.names[leader], attempts)
		if d := time.Since(start); d > 45*time.Second {
			t.Errorf("generation %d took %s to commit after the leader died", gen, d)
		}
		c.nodes[leader].start() // the cluster of three again
		waitFor(t, time.Minute, "the restarted node current again", func() bool {
			tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			s, err := js.Stream(tctx, "KV_"+l.Roster)
			if err != nil || s.CachedInfo().Cluster == nil {
				return false
			}
			for _, r := range s.CachedInfo().Cluster.Replicas {
				if !r.Current {
					return false
				}
			}
			return len(s.CachedInfo().Cluster.Replicas) == 2
		})
	}
}

// TestClusterRestartedWhole: every node of the cluster is killed at once
// and started again, on the same ports and stores, while an agent's
// watcher, given every node's URL, waits. The roster in force stays
// meanwhile; afterwards the watcher reconnects by itself, applies the
// next commit exactly as committed, and is healthy.
func TestClusterRestartedWhole(t *testing.T) {
	c := startCluster(t)
	l := LayoutFor(DefaultPrefix)
	_, p, ctx := replicatedPublisher(t, c, l, 3*time.Minute, nats.RetryOnFailedConnect(true))
	rec := newRecorder(t)
	r := roster(100)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	w := startWatcher(t, Config{Server: Server{URL: c.URL()}, Layout: l, OnChange: rec.onChange, Patience: 2 * time.Second})
	waitFor(t, 30*time.Second, "the watcher reading generation 1", func() bool { return rec.last() == 1 })

	for _, s := range c.nodes {
		s.kill()
	}
	waitFor(t, 20*time.Second, "the watcher reporting the cluster unreachable", func() bool { return w.Health() != nil })
	if g := w.Generation(); g != 1 {
		t.Fatalf("generation in force while the cluster is down: %d, want 1", g)
	}
	errs := make(chan error, len(c.nodes))
	for _, s := range c.nodes {
		go func() { errs <- s.startE() }()
	}
	for range c.nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	r2, d := change(rand.New(rand.NewPCG(25, 3)), r, 10, 200)
	rec.expect(2, r2)
	if n, err := publishUntilCommitted(ctx, p, 2, r2, d); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("generation 2 committed after the restart in %d attempts", n)
	}
	waitFor(t, time.Minute, "the watcher applying generation 2 after the restart", func() bool { return rec.last() == 2 })
	rec.check()
	waitFor(t, 20*time.Second, "the watcher healthy again", func() bool { return w.Health() == nil })
}

// TestClusterWatcherPartitionedFromItsServer: the node an agent's watcher
// reads from is cut off from it (a black hole: the connection stays open,
// nothing passes; the node stays in the cluster) while the controller
// commits. The watcher notices by its pings, within its patience, moves
// to another node by itself, and applies every commit exactly, in order,
// up to the last.
func TestClusterWatcherPartitionedFromItsServer(t *testing.T) {
	// Clients learn no other URL than the ones they are given: the
	// watcher's are the proxies'.
	c := startClusterConf(t, "  no_advertise: true\n", "", nil)
	l := LayoutFor(DefaultPrefix)
	_, p, ctx := replicatedPublisher(t, c, l, 3*time.Minute)
	var proxies []*proxy
	var urls []string
	for _, s := range c.nodes {
		px := newProxy(t, s.URL())
		proxies = append(proxies, px)
		urls = append(urls, px.URL())
	}
	rec := newRecorder(t)
	r := roster(100)
	rec.expect(1, r)
	publishRoster(t, p, 1, r)
	const patience = 2 * time.Second
	w := startWatcher(t, Config{Server: Server{URL: strings.Join(urls, ","), Name: "watcher ace"}, Layout: l, OnChange: rec.onChange, Patience: patience})
	waitFor(t, 30*time.Second, "the watcher reading generation 1", func() bool { return rec.last() == 1 })

	on := c.holding(t, "watcher ace")
	proxies[on].setCut(true)
	t.Logf("cut the watcher off from %s", c.names[on])
	rng := rand.New(rand.NewPCG(3, 25))
	const last = 30
	for gen := uint64(2); gen <= last; gen++ {
		next, d := change(rng, r, 5, 300)
		rec.expect(gen, next)
		if _, err := publishUntilCommitted(ctx, p, gen, next, d); err != nil {
			t.Fatal(err)
		}
		r = next
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, 3*patience+20*time.Second, "the watcher applying the last generation from another node", func() bool { return rec.last() == last })
	rec.check()
	// The cut node may list the black-holed connection until its own
	// pings give up; the watcher's live one is on another.
	t.Logf("the watcher moved to %s", c.names[c.holdingExcept(t, "watcher ace", on)])
	if err := w.Health(); err != nil {
		t.Errorf("Health after moving to another node = %v", err)
	}
}

// TestClusterPermissions: the permission layout holds on a cluster too
// (each node's configuration carries Permissions' accounts block): with
// three-replica buckets, ace's watcher, given every node, reads its
// declaration with ace's credentials, and ace is refused bay's.
func TestClusterPermissions(t *testing.T) {
	l := LayoutFor(DefaultPrefix)
	conf, err := Permissions(l, []string{"ace", "bay"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(ControllerPasswordVar, "cpw")
	t.Setenv(MachinePasswordVar("ace"), "apw")
	t.Setenv(MachinePasswordVar("bay"), "bpw")
	c := startClusterConf(t, "", string(conf), []nats.Option{nats.UserInfo(ControllerUser, "cpw")})
	withUser := func(user, pw string) string {
		var u []string
		for _, s := range c.nodes {
			u = append(u, fmt.Sprintf("nats://%s:%s@%s", user, pw, strings.TrimPrefix(s.URL(), "nats://")))
		}
		return strings.Join(u, ",")
	}
	nc, err := nats.Connect(withUser(ControllerUser, "cpw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p, err := NewPublisher(nc, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Retry(ctx, func(ctx context.Context) error { return p.EnsureReplicatedBuckets(ctx, 3) }); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t)
	rec.expect(1, roster(10))
	publishRoster(t, p, 1, roster(10))
	for _, m := range []string{"ace", "bay"} {
		d := &spec.Declaration{Schema: 1, Machine: m, Generation: 1, MeshNames: spec.FlagOff,
			Roster:     &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
			Containers: []spec.Container{{Name: "app", Image: "busybox", Env: map[string]string{"TOKEN": m + "-secret"}}}}
		if _, err := p.PublishDeclaration(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	startWatcher(t, Config{Server: Server{URL: withUser(MachineUser("ace"), "apw")}, Layout: l, Machine: "ace", Sink: rec, OnChange: rec.onChange})
	waitFor(t, 30*time.Second, "ace's watcher reading its declaration on the cluster", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.decls) > 0 && rec.decls[len(rec.decls)-1].Machine == "ace"
	})
	rec.check()

	ace, err := nats.Connect(withUser(MachineUser("ace"), "apw"), nats.CustomInboxPrefix(InboxPrefix("ace")), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer ace.Close()
	js, err := jetstream.New(ace)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, l.Machines)
	if err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
	defer tcancel()
	if e, err := kv.Get(tctx, "bay"); err == nil {
		t.Errorf("on the cluster, ace got bay's declaration: %s", e.Value())
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if kw, err := kv.Watch(wctx, ">"); err == nil {
		select {
		case e := <-kw.Updates():
			if e != nil {
				t.Errorf("on the cluster, ace watching the machines bucket got %s", e.Key())
			}
		case <-wctx.Done():
		}
		kw.Stop()
	}
	rkv, err := js.KeyValue(ctx, l.Roster)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if _, err := rkv.Put(pctx, NameKey("evil.internal"), []byte(`["10.6.6.6"]`)); err == nil {
		t.Error("on the cluster, ace's write to the roster was taken")
	}
}
