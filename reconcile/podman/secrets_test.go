package podman

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

// TestEnvValuesStayOutOfLabelsAndEvents is issue 22's defect 14 on real
// podman: a container the reconciler creates with a secret env value
// carries it in its environment (inspect's Config.Env) and nowhere else
// podman shows: not in any label (inspect's Config.Labels: the record label
// holds a keyed hash), and not in podman's event log for it (which copies
// the labels: the journal, on a systemd host, readable by the adm group);
// nor the unkeyed digest of the declaration, which whoever guesses the value
// rebuilds (the digest label is keyed: v2).
func TestEnvValuesStayOutOfLabelsAndEvents(t *testing.T) {
	const secret = "s3cr3t-hunter2-5e1f0c"
	prt, h := newRuntime(t)
	rt := scoped(prt, h.Prefix())
	d := render(t, h, spec.Container{Name: "db", Command: []string{"sleep", "600"},
		Env: map[string]string{"DB_PASSWORD": secret}}, &spec.Roster{Generation: 1}, spec.Mode{Names: spec.Copy})
	since := time.Now().Add(-time.Second)
	res := mustReconcile(t, newReconciler(t, rt, nil), []spec.Rendered{d})
	id := res.Outcomes[0].NewID
	if id == "" {
		t.Fatalf("the pass created nothing: %+v", res.Outcomes)
	}

	var inspected []struct {
		Config struct {
			Env    []string
			Labels map[string]string
		}
	}
	if err := json.Unmarshal([]byte(h.MustPodman("inspect", id)), &inspected); err != nil || len(inspected) != 1 {
		t.Fatalf("podman inspect %s: %v", id, err)
	}
	cfg := inspected[0].Config
	if !strings.Contains(strings.Join(cfg.Env, "\n"), "DB_PASSWORD="+secret) {
		t.Fatalf("the container's environment does not hold the value (%v): the test proves nothing", cfg.Env)
	}
	if !strings.Contains(cfg.Labels[digest.LabelRecord], `"DB_PASSWORD"`) {
		t.Fatalf("record label %q does not name DB_PASSWORD: the test proves nothing", cfg.Labels[digest.LabelRecord])
	}
	// Whoever guesses the value rightly rebuilds d, and its unkeyed (v1)
	// digest: no label may be checked against it.
	unkeyed := strings.TrimPrefix(digest.Of(d), "v1:sha256:")
	for k, v := range cfg.Labels {
		if strings.Contains(v, secret) {
			t.Errorf("podman inspect: label %s carries the env value: %s", k, v)
		}
		if strings.Contains(v, unkeyed) {
			t.Errorf("podman inspect: label %s carries the unkeyed digest of the declaration, which checks a guessed value: %s", k, v)
		}
	}

	// podman's events for the container, from before the pass to now:
	// bounded in time, not streamed.
	c, cancel := context.WithTimeout(ctx(t), 30*time.Second)
	defer cancel()
	events := make(chan types.Event, 64)
	opts := new(system.EventsOptions).WithStream(false).
		WithSince(since.Format(time.RFC3339Nano)).WithUntil(time.Now().Add(time.Second).Format(time.RFC3339Nano)).
		WithFilters(map[string][]string{"container": {id}})
	if err := system.Events(prt.call(c, "Events"), events, nil, opts); err != nil {
		t.Fatalf("podman events: %v", err)
	}
	var seen []string
	for e := range events {
		js, _ := json.Marshal(e)
		seen = append(seen, string(js))
	}
	all := strings.Join(seen, "\n")
	if len(seen) == 0 || !strings.Contains(all, "io.meshhost.record") || !strings.Contains(all, digest.LabelDigest) {
		t.Fatalf("podman's events for %s do not carry the labels (%d events): the test proves nothing:\n%s", id, len(seen), all)
	}
	if strings.Contains(all, secret) {
		t.Errorf("podman's events for the container carry the env value:\n%s", all)
	}
	if strings.Contains(all, unkeyed) {
		t.Errorf("podman's events for the container carry the unkeyed digest of the declaration:\n%s", all)
	}
	t.Logf("%d events for the container", len(seen))
}
