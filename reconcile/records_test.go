package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// A container as meshhost created it before keyed records (main 6dd967f):
// its digest and its record label, with the env value in clear, exactly as
// that meshhost wrote them for clearRecordContainer.
const (
	clearDigest = "v1:sha256:2d2b62c5e2cff539dc2b77fb37511dfb9f6008d5d183d35e9c62515ba9e520c9"
	clearRecord = `v1:{"name":"db","image":"postgres:16","env":{"DB_PASSWORD":"s3cr3t-hunter2","LOG":"info"},"labels":{"team":"data"},"networks":["podman"],"stop_timeout":30,"dns":{"servers":["10.88.0.1"],"search":["internal"],"options":["ndots:1"]},"resources":{"memory_bytes":268435456}}`
	clearSecret = "s3cr3t-hunter2"
)

func clearRecordContainer(t *testing.T, image string) spec.Rendered {
	t.Helper()
	c := spec.Container{Name: "db", Image: image, Env: map[string]string{"DB_PASSWORD": clearSecret, "LOG": "info"},
		Labels: map[string]string{"team": "data"}, Resources: spec.Resources{MemoryBytes: 256 << 20}, StopTimeout: 30 * time.Second}
	return render(t, c, nil, spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{
		Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Search: []string{"internal"}, Options: []string{"ndots:1"}}})
}

// TestClearRecordsUpgradeReplacesNothing: a container created before keyed
// records (its record label carries env values in clear), whose declaration
// has not changed, is kept by the new meshhost, pass after pass, with and
// without in-place updates, labelled or adopted: no replacement, no update,
// no create. It keeps its old label until it is replaced for another
// reason; then its new record holds no value, and the reason names only
// what changed (its env, compared value by value from the old record, did
// not).
func TestClearRecordsUpgradeReplacesNothing(t *testing.T) {
	d := clearRecordContainer(t, "postgres:16")
	if got := digest.Of(d); got != clearDigest {
		t.Fatalf("test is broken: the container's digest is %s, not the one recorded (%s)", got, clearDigest)
	}
	for _, tc := range []struct {
		name      string
		noInPlace bool
		adopted   bool // labelled by nothing; an adoption of the old meshhost records it
	}{
		{name: "labelled"},
		{name: "labelled, no in-place updates", noInPlace: true},
		{name: "adopted", adopted: true},
		{name: "adopted, no in-place updates", adopted: true, noInPlace: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rt := memory.New(memory.Options{})
			old := d
			old.Labels = map[string]string{"team": "data"}
			if !tc.adopted {
				old.Labels[reconcile.LabelManaged] = "true"
				old.Labels[reconcile.LabelOwner] = "ace"
				old.Labels[digest.LabelDigest] = clearDigest
				old.Labels[digest.LabelRecord] = clearRecord
			}
			id, err := rt.Create(ctx, old)
			if err != nil {
				t.Fatal(err)
			}
			rt.Start(ctx, id)
			var adoptions []reconcile.Adoption
			if tc.adopted {
				adoptions = []reconcile.Adoption{{ID: id, Name: "db", Digest: clearDigest, Record: clearRecord, Version: reconcile.AdoptionVersion}}
			}
			r := newReconciler(t, rt, func(c *reconcile.Config) {
				c.Owner, c.NoInPlaceUpdates, c.Adoptions = "ace", tc.noInPlace, adoptions
			})
			rt.ResetCalls()
			for pass := range 3 {
				res := mustReconcile(t, r, []spec.Rendered{d})
				if n := len(res.Outcomes); n != 1 || res.Outcomes[0].Kind != reconcile.Keep {
					t.Errorf("pass %d after the upgrade: %+v, want db kept", pass, res.Outcomes)
				}
			}
			for _, m := range []string{"Create", "Remove", "Stop", "Update", "Rename", "Inspect"} {
				if n := rt.Calls(m); n != 0 {
					t.Errorf("3 passes after the upgrade made %d %s calls, want none", n, m)
				}
			}
			if got, _ := rt.Container("db"); got.ID != id || got.Labels[digest.LabelRecord] != old.Labels[digest.LabelRecord] {
				t.Errorf("db is %s with record %q, want %s as it was", got.ID, got.Labels[digest.LabelRecord], id)
			}

			// Replaced for another reason: the reason names the image alone.
			next := clearRecordContainer(t, "postgres:17")
			p, err := r.Plan(ctx, []spec.Rendered{next})
			if err != nil {
				t.Fatal(err)
			}
			if ch := p.Changes(); len(ch) != 1 || ch[0].Kind != reconcile.Replace || ch[0].Reason != "image: postgres:16 -> postgres:17" {
				t.Fatalf("plan for a new image = %+v, want one replace naming the image alone", ch)
			}
			mustReconcile(t, r, []spec.Rendered{next})
			got, _ := rt.Container("db")
			record := got.Labels[digest.LabelRecord]
			if got.ID == id || strings.Contains(record, clearSecret) || !strings.Contains(record, `"DB_PASSWORD"`) {
				t.Errorf("after its replacement db (%s) has the record %q: want a new container whose record names DB_PASSWORD without its value", got.ID, record)
			}
		})
	}
}

// TestRecordsKeyedPerMachine: two machines (two keys) label the same
// container with other records; a Reconciler with the same key (a restart)
// keeps a container without judging its digest again (the record is the
// declaration's); one with another key (hash.key made anew) cannot judge
// its keyed digest, and compares it field by field: it adopts it, and says,
// when something else changes, that the hash key changed, instead of naming
// each env value changed (TestLostHashKeyReplacesNothingUnchanged).
func TestRecordsKeyedPerMachine(t *testing.T) {
	ctx := context.Background()
	d := clearRecordContainer(t, "postgres:16")
	keyA, keyB := digest.NewRandomKey(), digest.NewRandomKey()
	records := map[*digest.Key]string{}
	for _, key := range []*digest.Key{keyA, keyB} {
		rt := memory.New(memory.Options{})
		mustReconcile(t, newReconciler(t, rt, func(c *reconcile.Config) { c.HashKey = key }), []spec.Rendered{d})
		got, _ := rt.Container("db")
		records[key] = got.Labels[digest.LabelRecord]
		if strings.Contains(records[key], clearSecret) {
			t.Errorf("record %q carries the env value", records[key])
		}
	}
	if records[keyA] == records[keyB] {
		t.Errorf("two machines' keys wrote the same record %q", records[keyA])
	}

	rt := memory.New(memory.Options{})
	mustReconcile(t, newReconciler(t, rt, func(c *reconcile.Config) { c.HashKey = keyA }), []spec.Rendered{d})
	for _, tc := range []struct {
		name string
		key  *digest.Key
	}{{"the same key", keyA}, {"another key", keyB}} {
		r := newReconciler(t, rt, func(c *reconcile.Config) { c.HashKey = tc.key })
		p, err := r.Plan(ctx, []spec.Rendered{d})
		if err != nil {
			t.Fatal(err)
		}
		switch ch := p.Changes(); {
		case tc.key == keyA && len(ch) != 0:
			t.Errorf("%s: plan of the unchanged declaration = %v; want nothing", tc.name, p)
		case tc.key == keyB && (len(ch) != 1 || ch[0].Kind != reconcile.Adopt || !strings.HasPrefix(ch[0].Reason, "hash key changed: ")):
			t.Errorf("%s: plan of the unchanged declaration = %v; want db adopted, the hash key named", tc.name, p)
		}
		next := clearRecordContainer(t, "postgres:17")
		next.Env = map[string]string{"DB_PASSWORD": "n3w", "LOG": "info"}
		p, err = r.Plan(ctx, []spec.Rendered{next})
		if err != nil {
			t.Fatal(err)
		}
		reason := ""
		if ch := p.Changes(); len(ch) == 1 {
			reason = ch[0].Reason
		}
		want := fmt.Sprintf("image: postgres:16 -> postgres:17; env: ~DB_PASSWORD (%s→%s)", keyA.ValueHash(clearSecret), keyA.ValueHash("n3w"))
		if tc.key == keyB {
			want = "image: postgres:16 -> postgres:17; hash key changed: its digest label was made with another key than the state directory's hash.key (made anew since)"
		}
		if reason != want {
			t.Errorf("%s: reason = %q, want %q", tc.name, reason, want)
		}
	}
}
