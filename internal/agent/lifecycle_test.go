package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/fakesystemd"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// blockPass makes the fixture's next pass wait inside the runtime (as a
// health-gated start waits on podman) until release is called.
func blockPass(t *testing.T, f *fixture) (release func(), passed <-chan error) {
	t.Helper()
	entered, rel := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.rt.Before(func(c memory.Call) error {
		if c.Method == "List" {
			once.Do(func() { close(entered) })
			<-rel
		}
		return nil
	})
	if _, err := f.source.Offer(declaration(2, spec.FlagOn, 2, 11), "test"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.agent.Pass(context.Background())
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the pass never reached the runtime")
	}
	var relOnce sync.Once
	release = func() {
		relOnce.Do(func() {
			close(rel)
			f.rt.Before(nil)
		})
	}
	t.Cleanup(release)
	return release, done
}

// TestProbesAnswerWithin100msDuringABlockedPass: /livez, /readyz and
// /healthz each answer in under 100 ms, again and again, for as long as a
// pass is blocked (seconds here; minutes change nothing: they read what
// the last pass published and the resolver's last look).
func TestProbesAnswerWithin100msDuringABlockedPass(t *testing.T) {
	f := newFixture(t, true, func(c *Config) { c.ResolverAlive = func() error { return nil } })
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	release, passed := blockPass(t, f)
	h := f.agent.Handler()
	var worst time.Duration
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, path := range []string{"/livez", "/readyz", "/healthz"} {
			start := time.Now()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
			took := time.Since(start)
			worst = max(worst, took)
			if took >= 100*time.Millisecond || w.Code != http.StatusOK {
				t.Fatalf("GET %s during a blocked pass: %d %q in %v, want 200 in under 100ms", path, w.Code, w.Body.String(), took)
			}
		}
	}
	t.Logf("slowest probe answer during the blocked pass: %v", worst)
	release()
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
}

// TestLivenessAndReadiness: liveness follows the resolver alone; readiness
// also wants the last pass to have succeeded and the resolver exposed
// where the gate says.
func TestLivenessAndReadiness(t *testing.T) {
	var resolverDown atomic.Bool
	var exposeErr atomic.Pointer[error]
	f := newFixture(t, true, func(c *Config) {
		c.ResolverAlive = func() error {
			if resolverDown.Load() {
				return errors.New("control socket missing")
			}
			return nil
		}
		c.Exposer = fakeExposer{err: &exposeErr}
	})
	if err := f.agent.Readiness(); err == nil {
		t.Error("Readiness before any pass = nil, want not ready")
	}
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	if err := f.agent.Readiness(); err != nil {
		t.Fatalf("Readiness after a good pass = %v", err)
	}
	e := errors.New("address in use")
	exposeErr.Store(&e)
	f.agent.Pass(context.Background())
	if err := f.agent.Readiness(); err == nil || !strings.Contains(err.Error(), "not exposed where the gate says") {
		t.Errorf("Readiness with the exposure failing = %v, want not ready", err)
	}
	if err := f.agent.Liveness(); err != nil {
		t.Errorf("Liveness with the exposure failing = %v, want alive", err)
	}
	exposeErr.Store(nil)
	f.agent.Pass(context.Background())
	resolverDown.Store(true)
	if err := f.agent.Liveness(); err == nil || !strings.Contains(err.Error(), "control socket missing") {
		t.Errorf("Liveness with the resolver down = %v", err)
	}
	if err := f.agent.Readiness(); err == nil {
		t.Error("Readiness with the resolver down = nil")
	}
}

// TestRunRetriesWithCappedBackoff: failed passes are retried after 1s, 2s,
// 4s ... up to the interval, and a good pass brings the interval back.
// Time-driven: the bubble's clock moves, no test waits.
func TestRunRetriesWithCappedBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, true, func(c *Config) { c.Interval = 30 * time.Second })
		if _, err := f.source.Offer(declaration(1, spec.FlagOn, 2, 10), "test"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var lists []time.Duration
		failing := true
		start := time.Now()
		f.rt.Before(func(c memory.Call) error {
			if c.Method != "List" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			lists = append(lists, time.Since(start))
			if failing {
				return errors.New("podman's API is down")
			}
			return nil
		})
		select { // the offer's change: Run's first pass takes it
		case <-f.source.Changed():
		default:
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.agent.Run(ctx) }()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		mu.Lock()
		failing = false
		n := len(lists)
		mu.Unlock()
		time.Sleep(60 * time.Second) // the next retry (capped at 30s) succeeds, then the interval
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		// Passes at 0, 1, 3, 7, 15, 31, 61, 91 (capped at 30s) ...
		want := []time.Duration{0, 1, 3, 7, 15, 31, 61, 91}
		for i, w := range want {
			if i >= len(lists) || lists[i] != w*time.Second {
				t.Fatalf("passes at %v, want them at %v seconds", lists, want)
			}
		}
		if n > len(want) {
			t.Errorf("%d passes in the first two minutes, want %d", n, len(want))
		}
		if after := lists[n:]; len(after) != 2 || after[0] != 121*time.Second || after[1] != 151*time.Second {
			t.Errorf("passes after the recovery at %v, want [2m1s 2m31s] (the last retry, then the interval)", after)
		}
	})
}

// TestNotify: READY=1 only once the resolver answers, WATCHDOG=1 all
// through a blocked pass, STOPPING=1 at the end.
func TestNotify(t *testing.T) {
	sd := fakesystemd.New(t)
	t.Setenv("NOTIFY_SOCKET", sd.Socket())
	t.Setenv("WATCHDOG_USEC", "400000")
	var resolverUp atomic.Bool
	f := newFixture(t, true, func(c *Config) {
		c.ResolverAlive = func() error {
			if !resolverUp.Load() {
				return errors.New("no resolver yet")
			}
			return nil
		}
	})
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.agent.Notify(ctx); close(done) }()
	time.Sleep(500 * time.Millisecond)
	for _, m := range sd.Messages() {
		if m.Has("READY=1") || m.Has("WATCHDOG=1") {
			t.Fatalf("%q sent while the resolver does not answer", m.State)
		}
	}
	up := time.Now()
	resolverUp.Store(true)
	_, ready := sd.Wait(0, "READY=1", 10*time.Second)
	if ready.At.Before(up) {
		t.Errorf("READY=1 at %v, before the resolver answered at %v", ready.At, up)
	}

	release, passed := blockPass(t, f)
	from := time.Now()
	time.Sleep(2 * time.Second)
	to := time.Now()
	var pings []time.Time
	for _, m := range sd.Messages() {
		if m.Has("WATCHDOG=1") && m.At.After(from) && m.At.Before(to) {
			pings = append(pings, m.At)
		}
	}
	longest := 0 * time.Second
	for i := 1; i < len(pings); i++ {
		longest = max(longest, pings[i].Sub(pings[i-1]))
	}
	if len(pings) < 4 || longest >= 400*time.Millisecond {
		t.Errorf("during 2s of a blocked pass: %d WATCHDOG=1, longest gap %v; want at least 4, each under the 400ms watchdog", len(pings), longest)
	}
	release()
	<-passed
	n := len(sd.Messages())
	cancel()
	<-done
	sd.Wait(n, "STOPPING=1", 5*time.Second)
}

// TestWatchdogIgnoresTheResolver: once ready, WATCHDOG=1 keeps coming
// while the resolver is down. The watchdog is the agent's own: were it to
// follow the resolver, a resolver down for longer than WatchdogSec would
// get the agent killed, and the agent restarted would wait for the
// resolver to send READY=1, and be killed again (TimeoutStartSec), in a
// loop. /livez still says the resolver does not answer.
func TestWatchdogIgnoresTheResolver(t *testing.T) {
	sd := fakesystemd.New(t)
	t.Setenv("NOTIFY_SOCKET", sd.Socket())
	t.Setenv("WATCHDOG_USEC", "400000")
	var down atomic.Bool
	f := newFixture(t, true, func(c *Config) {
		c.ResolverAlive = func() error {
			if down.Load() {
				return errors.New("resolver control socket: connection refused")
			}
			return nil
		}
	})
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.agent.Notify(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	i, _ := sd.Wait(0, "READY=1", 10*time.Second)
	sd.Wait(i+1, "WATCHDOG=1", 10*time.Second)

	down.Store(true)
	if err := f.agent.Liveness(); err == nil {
		t.Errorf("Liveness() = nil with the resolver down; /livez says the resolver does not answer")
	}
	n := len(sd.Messages())
	for range 5 { // at 100 ms each, 5 pings span more than the 400 ms watchdog
		n, _ = sd.Wait(n, "WATCHDOG=1", 10*time.Second)
		n++
	}
}

// fakeExposer exposes every network, or fails with *err when set.
type fakeExposer struct{ err *atomic.Pointer[error] }

func (e fakeExposer) Expose(migrations.Network, migrations.Strategy) (spec.DNSConfig, error) {
	if p := e.err.Load(); p != nil {
		return spec.DNSConfig{}, *p
	}
	return spec.DNSConfig{}, nil
}

func (fakeExposer) Retain([]migrations.Network) {}
