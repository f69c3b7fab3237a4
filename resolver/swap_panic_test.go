package resolver

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"codeberg.org/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshhost/meshhost/spec"
)

// TestSwapPanicKeepsRoster: a panic while compiling a roster is recovered,
// logged with its stack and counted; the roster served stays, and the next
// good roster swaps in.
func TestSwapPanicKeepsRoster(t *testing.T) {
	var log bytes.Buffer
	s, _ := newTestServer(t, testRoster(7), Config{Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	var boom atomic.Bool
	s.compile = func(r *spec.Roster, ttl, negTTL uint32, busy func() bool) (*table, error) {
		if boom.Load() {
			var labels []byte
			_ = labels[0] // what the zone apex did
		}
		return buildTable(r, ttl, negTTL, busy)
	}
	boom.Store(true)
	next := testRoster(8)
	next.Zones = append(next.Zones, "zurag.be") // new zones: compiled whole
	err := s.Update(next)
	if err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Update with a panicking compile = %v, want an error saying it panicked", err)
	}
	if got := s.Roster().Generation; got != 7 {
		t.Errorf("serving generation %d after the panic, want 7", got)
	}
	if m := ask(t, s, "gitea.novox.internal.", dns.TypeA); len(m.Answer) != 1 {
		t.Errorf("after the panic: %v, want the old roster's answer", answers(m))
	}
	var m dto.Metric
	if err := s.metrics.swapPanics.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("meshhost_resolver_swap_panics_total = %v, want 1", got)
	}
	if !strings.Contains(log.String(), "a roster swap panicked") || !strings.Contains(log.String(), "swap_panic_test.go") {
		t.Errorf("log does not report the panic with its stack:\n%s", log.String())
	}
	boom.Store(false)
	if err := s.Update(next); err != nil {
		t.Errorf("the next good roster: %v", err)
	}
	if got := s.Roster().Generation; got != 8 {
		t.Errorf("serving generation %d, want 8", got)
	}
}

// TestApplyPanicKeepsRoster: a panic while applying a delta is recovered
// and counted like a compile's; the roster served stays.
func TestApplyPanicKeepsRoster(t *testing.T) {
	s, _ := newTestServer(t, testRoster(7), Config{Registerer: prometheus.NewRegistry()})
	s.applyDelta = func(*table, *spec.RosterDelta) (*table, error) { panic("boom") }
	d := &spec.RosterDelta{From: 7, To: 8, Remove: []string{"gitea.novox.internal"}}
	if err := s.Apply(d); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Apply with a panicking apply = %v, want an error saying it panicked", err)
	}
	if m := ask(t, s, "gitea.novox.internal.", dns.TypeA); len(m.Answer) != 1 {
		t.Errorf("after the panic: %v, want the old roster's answer", answers(m))
	}
	var m dto.Metric
	if err := s.metrics.swapPanics.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("meshhost_resolver_swap_panics_total = %v, want 1", got)
	}
}
