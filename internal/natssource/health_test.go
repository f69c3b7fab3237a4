package natssource

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHealthRefusedCommitsPastPatience: a watch that is live but whose
// commits are all refused leaves the roster (or declaration) in force
// frozen; past the patience Health reports it, with the reason and the
// generations, and a commit put in force ends the streak. Both kinds:
// roster commits and machine declarations.
func TestHealthRefusedCommitsPastPatience(t *testing.T) {
	const patience = 10 * time.Second
	for _, kind := range []string{"roster", "declaration"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				w, err := NewWatcher(Config{Server: Server{URL: "nats://127.0.0.1:4222"}, Patience: patience, Machine: "m1", Registerer: reg})
				if err != nil {
					t.Fatal(err)
				}
				w.setLive() // connected and reading
				rev := uint64(0)
				refuse := func() {
					rev++
					if kind == "roster" {
						w.refused(&CommitError{Generation: 9, Revision: 40, Reason: reasonInconsistent, Err: errors.New("name web.m1 is missing")})
						return
					}
					w.observeDeclaration(entry{key: "m1", rev: rev, value: []byte(`{"machine": "m1", "generation": 3, `)})
				}
				refuse()
				time.Sleep(patience / 2)
				refuse()
				if err := w.Health(); err != nil {
					t.Fatalf("within the patience: Health = %v, want nil", err)
				}
				time.Sleep(patience)
				refuse()
				err = w.Health()
				if err == nil {
					t.Fatalf("commits refused for %s (patience %s): Health = nil, want the refusal", patience*3/2, patience)
				}
				want := []string{kind + " commits", "refused for 15s", "patience 10s"}
				if kind == "roster" {
					want = append(want, reasonInconsistent, "generation 9", "none in force", "name web.m1 is missing")
				} else {
					want = append(want, reasonInvalid, "none in force")
				}
				for _, s := range want {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("Health = %q, want it to say %q", err, s)
					}
				}
				if got := gaugeValue(t, reg, "meshhost_natssource_refused_seconds"); got != 15 {
					t.Errorf("meshhost_natssource_refused_seconds = %v, want 15", got)
				}
			})
		})
	}
}

// TestRefusalStreakEndsWithACommitInForce: a commit of the kind refused
// put in force ends the streak (Health and the gauge back to nil and 0);
// one of the other kind does not.
func TestRefusalStreakEndsWithACommitInForce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		w, err := NewWatcher(Config{Server: Server{URL: "nats://127.0.0.1:4222"}, Patience: time.Second, Machine: "m1", Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		w.setLive()
		w.refused(&CommitError{Generation: 9, Revision: 40, Reason: reasonStale, Err: errors.New("generation 9 is not after 9")})
		time.Sleep(2 * time.Second)
		w.refusals.refuse("declaration", reasonInvalid, "bad", 4, 3)
		w.refusals.clear("declaration")
		if w.Health() == nil {
			t.Fatal("a declaration in force ended the roster's streak")
		}
		w.refusals.clear("roster")
		if err := w.Health(); err != nil {
			t.Errorf("after a roster commit in force: Health = %v, want nil", err)
		}
		if got := gaugeValue(t, reg, "meshhost_natssource_refused_seconds"); got != 0 {
			t.Errorf("meshhost_natssource_refused_seconds = %v, want 0", got)
		}
	})
}

// gaugeValue is the value of reg's gauge name.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s gathered", name)
	return 0
}
