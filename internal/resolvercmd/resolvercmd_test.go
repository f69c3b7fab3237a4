package resolvercmd

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/resolver"
)

// TestCacheFlags: the cache is on by default; a flag's 0 turns it (or
// negative answers) off, which the Config says with a negative value.
func TestCacheFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want resolver.Config
	}{
		{nil, resolver.Config{CacheSize: resolver.DefaultCacheSize, CacheMaxTTL: resolver.DefaultCacheMaxTTL, CacheMaxNegativeTTL: resolver.DefaultCacheMaxNegativeTTL}},
		{[]string{"--cache-size", "0"}, resolver.Config{CacheSize: -1, CacheMaxTTL: resolver.DefaultCacheMaxTTL, CacheMaxNegativeTTL: resolver.DefaultCacheMaxNegativeTTL}},
		{[]string{"--cache-max-ttl", "0", "--cache-size", "50"}, resolver.Config{CacheSize: 50, CacheMaxTTL: -1, CacheMaxNegativeTTL: resolver.DefaultCacheMaxNegativeTTL}},
		{[]string{"--cache-max-negative-ttl", "0", "--cache-max-ttl", "30s"}, resolver.Config{CacheSize: resolver.DefaultCacheSize, CacheMaxTTL: 30 * time.Second, CacheMaxNegativeTTL: -1}},
	} {
		args := append([]string{"--listen", "127.0.0.1:5353", "--roster", "r.json"}, tc.args...)
		c, _, err := parseForTest(args...)
		if err != nil {
			t.Fatalf("flags %q: %v", tc.args, err)
		}
		f := c.f
		var got resolver.Config
		f.cache.Apply(&got)
		if got.CacheSize != tc.want.CacheSize || got.CacheMaxTTL != tc.want.CacheMaxTTL || got.CacheMaxNegativeTTL != tc.want.CacheMaxNegativeTTL {
			t.Errorf("flags %q: cache %d, %v, %v; want %d, %v, %v", tc.args, got.CacheSize, got.CacheMaxTTL, got.CacheMaxNegativeTTL,
				tc.want.CacheSize, tc.want.CacheMaxTTL, tc.want.CacheMaxNegativeTTL)
		}
	}
}

// TestMetricsWaitsForThePort: the metrics endpoint's port held by another
// process (a predecessor still exiting) is retried in the background,
// logged once when it outlasts metricsPatience, and served once free.
func TestMetricsWaitsForThePort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := held.Addr().String()
		var logs syncbuf.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		ctx, cancel := context.WithCancel(t.Context())
		served := make(chan string, 1)
		done := make(chan struct{})
		go func() {
			serveMetrics(ctx, log, addr, func(l net.Listener) error {
				served <- l.Addr().String()
				<-ctx.Done()
				return l.Close()
			})
			close(done)
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		if strings.Contains(logs.String(), "cannot listen") {
			t.Errorf("logged within a second, before metricsPatience:\n%s", logs.String())
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := strings.Count(logs.String(), "cannot listen yet"); n != 1 {
			t.Errorf("the taken port logged %d times in a minute, want once:\n%s", n, logs.String())
		}
		select {
		case a := <-served:
			t.Fatalf("served on %s while the port is held", a)
		default:
		}

		held.Close()
		time.Sleep(metricsRetryMax)
		synctest.Wait()
		select {
		case a := <-served:
			if a != addr {
				t.Errorf("served on %s, want %s", a, addr)
			}
		default:
			t.Fatalf("not served %v after the port was freed:\n%s", metricsRetryMax, logs.String())
		}
		if !strings.Contains(logs.String(), "metrics: listening at last") {
			t.Errorf("no line says the endpoint listens at last:\n%s", logs.String())
		}
		cancel()
		<-done
	})
}

// parseForTest parses args as the command's flags and checks them.
func parseForTest(args ...string) (*Command, []string, error) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := New("test", fs)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	warnings, err := c.check(nil)
	return c, warnings, err
}

// TestMetricsFlag: --http (and its deprecated spelling, --metrics) is
// checked with the flags (the endpoint binds in the background, and would
// only retry a malformed address).
func TestMetricsFlag(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"127.0.0.1:9470", true},
		{"localhost:9470", true},
		{"[::1]:9470", true},
		{"off", true},
		{"9470", false},
		{"127.0.0.1:http", false},
		{"127.0.0.1:70000", false},
		{"0.0.0.0:9470", false}, // off loopback without --http-remote
		{"10.1.2.3:9470", false},
	} {
		for _, flagName := range []string{"--http", "--metrics"} {
			c, _, err := parseForTest("--listen", "127.0.0.1:5353", "--roster", "r.json", flagName, tc.v)
			var ce *ConfigError
			if (err == nil) != tc.ok || err != nil && !errors.As(err, &ce) {
				t.Errorf("%s %q: %v, want ok=%t (or a *ConfigError)", flagName, tc.v, err, tc.ok)
			}
			if err == nil && c.f.http != tc.v {
				t.Errorf("%s %q: the endpoint is %q", flagName, tc.v, c.f.http)
			}
		}
	}
}

// TestReadyPatience: READY=1 waits for the addresses to answer the
// resolver's own query, at most readyPatience; the status then names those
// that do not, and they are asked on until they answer, which is logged
// and reported.
func TestReadyPatience(t *testing.T) {
	a, b := netip.MustParseAddrPort("127.0.0.1:5301"), netip.MustParseAddrPort("127.0.0.1:5302")
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if silent := awaitAnswering(t.Context(), []netip.AddrPort{a, b}, readyPatience, func(netip.AddrPort) bool { return true }); len(silent) > 0 || time.Since(start) > 0 {
			t.Errorf("answering at once: silent %v after %v, want none at once", silent, time.Since(start))
		}

		var asked atomic.Int32
		answer := func(x netip.AddrPort) bool { return x == a && asked.Add(1) > 3 } // a answers late, b never
		start = time.Now()
		silent := awaitAnswering(t.Context(), []netip.AddrPort{a, b}, readyPatience, answer)
		if took := time.Since(start); took < readyPatience || took > readyPatience+time.Second {
			t.Errorf("awaitAnswering with %s silent returned after %v, want %v", b, took, readyPatience)
		}
		if len(silent) != 1 || silent[0] != b {
			t.Fatalf("silent = %v, want [%s]", silent, b)
		}
		status := func(s []netip.AddrPort) string { return readyStatus(3, 2, s) }
		if got, want := status(silent), "serving generation 3 on 2 addresses; 1 do not answer the resolver's own query: [127.0.0.1:5302]"; got != want {
			t.Errorf("status = %q, want %q", got, want)
		}

		var up atomic.Bool
		var logs syncbuf.Buffer
		notes := make(chan string, 10)
		done := make(chan struct{})
		go func() {
			watchSilent(t.Context(), slog.New(slog.NewTextHandler(&logs, nil)), silent,
				func() []netip.AddrPort { return []netip.AddrPort{a, b} },
				func(netip.AddrPort) bool { return up.Load() }, status, func(st string) { notes <- st })
			close(done)
		}()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := len(notes); n > 0 || logs.String() != "" {
			t.Errorf("while %s is silent: %d status updates, logs %q; want none", b, n, logs.String())
		}
		up.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case st := <-notes:
			if want := "STATUS=serving generation 3 on 2 addresses"; st != want {
				t.Errorf("once %s answers: %q, want %q", b, st, want)
			}
		default:
			t.Errorf("no status once %s answers", b)
		}
		if !strings.Contains(logs.String(), "answer the resolver's own query now") || !strings.Contains(logs.String(), b.String()) {
			t.Errorf("no line says %s answers now:\n%s", b, logs.String())
		}
		select {
		case <-done:
		default:
			t.Errorf("watchSilent still runs with every address answering")
		}
	})
}
