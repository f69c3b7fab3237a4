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
// not), and its new digest is keyed (v2).
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
			if dg := got.Labels[digest.LabelDigest]; !strings.HasPrefix(dg, "v2:hmac-sha256:") || testKey.Judges(dg) != nil || strings.Contains(dg, strings.TrimPrefix(digest.Of(next), "v1:sha256:")) {
				t.Errorf("after its replacement db has the digest %q, want the keyed v2 digest (not the unkeyed v1 one)", dg)
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

// TestLostHashKeyReplacesNothingUnchanged: the machine's hash key is lost
// and made anew (another key), so no container's keyed digest can be
// judged. Each is inspected once and judged field by field: an unchanged one
// is adopted (kept: no restart, whatever their number), pass after pass;
// one whose declaration changed is replaced, by its env value (seen by the
// inspection), by an env key no longer declared (seen by its record, which
// the inspection cannot tell from the image's environment) or by its image,
// each reason saying "hash key changed"; what is then created carries the
// new key's digest.
func TestLostHashKeyReplacesNothingUnchanged(t *testing.T) {
	keyA, keyB := digest.NewRandomKey(), digest.NewRandomKey()
	decl := func(i int, image string, env map[string]string) spec.Rendered {
		c := container(fmt.Sprintf("db%d", i), image)
		c.Env = env
		return render(t, c, nil, resolveMode)
	}
	before := func(i int) spec.Rendered {
		return decl(i, "postgres:16", map[string]string{"DB_PASSWORD": "hunter2", "LOG": "info"})
	}
	setup := func() (*memory.Runtime, []spec.Rendered) {
		rt := memory.New(memory.Options{})
		var ds []spec.Rendered
		for i := range 4 {
			ds = append(ds, before(i))
		}
		mustReconcile(t, newReconciler(t, rt, func(c *reconcile.Config) { c.HashKey = keyA }), ds)
		rt.ResetCalls()
		return rt, ds
	}

	t.Run("unchanged", func(t *testing.T) {
		rt, ds := setup()
		r := newReconciler(t, rt, func(c *reconcile.Config) { c.HashKey = keyB })
		for pass := range 3 {
			res := mustReconcile(t, r, ds)
			for _, o := range res.Outcomes {
				switch {
				case pass == 0 && (o.Kind != reconcile.Adopt || !strings.HasPrefix(o.Reason, "hash key changed: ") || !strings.HasSuffix(o.Reason, "; its settings match the declaration")):
					t.Errorf("pass %d: %s %s (%s), want adopted, the hash key named", pass, o.Kind, o.Name, o.Reason)
				case pass > 0 && o.Kind != reconcile.Keep:
					t.Errorf("pass %d: %s %s (%s), want kept", pass, o.Kind, o.Name, o.Reason)
				}
			}
		}
		for _, m := range []string{"Create", "Remove", "Stop", "Update", "Rename"} {
			if n := rt.Calls(m); n != 0 {
				t.Errorf("3 passes with another key made %d %s calls, want none", n, m)
			}
		}
		if n := rt.Calls("Inspect"); n != len(ds) {
			t.Errorf("3 passes with another key made %d Inspect calls, want %d (one per container, once)", n, len(ds))
		}
	})

	t.Run("changed", func(t *testing.T) {
		rt, _ := setup()
		r := newReconciler(t, rt, func(c *reconcile.Config) { c.HashKey = keyB })
		ds := []spec.Rendered{
			decl(0, "postgres:16", map[string]string{"DB_PASSWORD": "hunter3", "LOG": "info"}), // a value
			decl(1, "postgres:16", map[string]string{"DB_PASSWORD": "hunter2"}),                // a key gone
			decl(2, "postgres:17", map[string]string{"DB_PASSWORD": "hunter2", "LOG": "info"}), // the image
			before(3),
		}
		want := map[string]reconcile.Kind{"db0": reconcile.Replace, "db1": reconcile.Replace, "db2": reconcile.Replace, "db3": reconcile.Adopt}
		wantIn := map[string]string{"db0": "env: ~DB_PASSWORD (", "db1": "env: -LOG (", "db2": "image: postgres:16 -> postgres:17"}
		res := mustReconcile(t, r, ds)
		if len(res.Outcomes) != len(ds) {
			t.Fatalf("outcomes %+v, want one for each of %d containers", res.Outcomes, len(ds))
		}
		for _, o := range res.Outcomes {
			if o.Kind != want[o.Name] || !strings.Contains(o.Reason, "hash key changed: ") || !strings.Contains(o.Reason, wantIn[o.Name]) {
				t.Errorf("%s %s (%s), want %s, the hash key named, and %q", o.Kind, o.Name, o.Reason, want[o.Name], wantIn[o.Name])
			}
			if strings.Contains(o.Reason, "hunter") {
				t.Errorf("%s: the reason %q carries a value", o.Name, o.Reason)
			}
		}
		for _, d := range ds[:3] {
			got, _ := rt.Container(d.Name)
			if err := keyB.Judges(got.Labels[digest.LabelDigest]); err != nil {
				t.Errorf("%s replaced with the digest %q: %v, want the new key's", d.Name, got.Labels[digest.LabelDigest], err)
			}
		}
		for _, o := range mustReconcile(t, r, ds).Outcomes {
			if o.Kind != reconcile.Keep {
				t.Errorf("the pass after: %s %s (%s), want kept", o.Kind, o.Name, o.Reason)
			}
		}
	})
}
