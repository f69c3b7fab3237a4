package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// TestHealthAndReportDoNotWaitForAPass blocks a pass inside the runtime
// (its List call waits) and checks that /healthz and /v1/report answer
// meanwhile, from what the last finished pass published. They took the
// lock a whole pass holds, so a pass waiting minutes on podman (a
// health-gated start) made them wait as long.
func TestHealthAndReportDoNotWaitForAPass(t *testing.T) {
	f := newFixture(t, true)
	f.push(t, declaration(1, spec.FlagOn, 2, 10))

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.rt.Before(func(c memory.Call) error {
		if c.Method == "List" {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	})
	if _, err := f.source.Offer(declaration(2, spec.FlagOn, 2, 11), "test"); err != nil {
		t.Fatal(err)
	}
	passed := make(chan error, 1)
	go func() {
		_, err := f.agent.Pass(context.Background())
		passed <- err
	}()
	select {
	case <-entered: // the pass holds the agent's lock, waiting on the runtime
	case <-time.After(30 * time.Second):
		t.Fatal("the pass never reached the runtime")
	}

	h := f.agent.Handler()
	for _, tc := range []struct{ path, want string }{
		{"/healthz", "ok"},
		{"/v1/report", `"generation":1`},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tc.path, nil))
				done <- w
			}()
			select {
			case w := <-done:
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), tc.want) {
					t.Errorf("GET %s during a pass = %d %q, want 200 with %s", tc.path, w.Code, w.Body.String(), tc.want)
				}
			case <-time.After(10 * time.Second): // generous: it answers in microseconds
				t.Errorf("GET %s did not answer within 10s while a pass was blocked", tc.path)
			}
		})
	}

	close(release)
	f.rt.Before(nil)
	if err := <-passed; err != nil {
		t.Fatalf("the blocked pass, released: %v", err)
	}
	var rep Report
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/report", nil))
	if err := json.Unmarshal(w.Body.Bytes(), &rep); err != nil || rep.Generation != 2 {
		t.Errorf("report after the pass = %+v, %v; want generation 2", rep, err)
	}
}

// TestHealthTurnsStaleWithoutPasses: the agent is unhealthy once no pass
// has ended for three intervals and a minute, and healthy again after the
// next pass. Time-driven: the bubble's clock moves, no test waits.
func TestHealthTurnsStaleWithoutPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, true, func(c *Config) { c.Interval = 30 * time.Second })
		f.push(t, declaration(1, spec.FlagOn, 2, 10))
		if err := f.agent.Health(); err != nil {
			t.Fatalf("Health right after a pass = %v, want nil", err)
		}
		time.Sleep(3*30*time.Second + time.Minute)
		if err := f.agent.Health(); err != nil {
			t.Fatalf("Health at exactly the limit = %v, want nil", err)
		}
		time.Sleep(time.Second)
		if err := f.agent.Health(); err == nil || !strings.Contains(err.Error(), "no pass since") {
			t.Fatalf("Health after 2m31s without a pass = %v, want stale", err)
		}
		if _, err := f.agent.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := f.agent.Health(); err != nil {
			t.Errorf("Health after the next pass = %v, want nil", err)
		}
	})
}

// TestJournalRecordsPassesWithGeneration: the agent journals every pass
// that did something with the generation of the declaration it applied,
// and each declaration once.
func TestJournalRecordsPassesWithGeneration(t *testing.T) {
	j, err := journal.Open(t.TempDir(), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, true, func(c *Config) { c.Journal = j })
	f.push(t, declaration(1, spec.FlagOn, 2, 10))
	f.push(t, declaration(2, spec.FlagOn, 3, 10)) // app2 created
	f.push(t, declaration(3, spec.FlagOn, 3, 11)) // a roster change: nothing to do in resolve mode
	passes, err := j.Passes()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range passes {
		var acts []string
		for _, a := range p.Actions {
			acts = append(acts, a.Kind+" "+a.Container)
		}
		got = append(got, strings.Join(append([]string{"generation " + itoa(p.Generation)}, acts...), ", "))
	}
	want := []string{"generation 1, create app0, create app1", "generation 2, create app2"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("journal passes = %q, want %q", got, want)
	}
	decls, err := j.Declarations()
	if err != nil || len(decls) != 3 {
		t.Errorf("journal declarations = %d, %v; want 3", len(decls), err)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
