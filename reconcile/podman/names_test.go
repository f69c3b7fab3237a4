package podman

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

func testRoster(t testing.TB) *spec.Roster {
	t.Helper()
	a := netip.MustParseAddr
	r := &spec.Roster{
		Generation: 7,
		Zones:      []string{"mesh.internal"},
		Names: map[string][]netip.Addr{
			"db.hub.mesh.internal":  {a("100.64.0.5"), a("fd7a:115c:a1e0::5")},
			"api.hub.mesh.internal": {a("100.64.0.6")},
			"searxng.zurag.be":      {a("100.64.0.9")},
			"v6only.mesh.internal":  {a("fd7a:115c:a1e0::7")},
		},
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRuntimeGetsWhatRenderSaid creates a container in each name mode through
// the adapter and reads, inside the running container, the /etc/hosts and
// /etc/resolv.conf podman wrote: they must be exactly what Render said. The
// digest labels come back from List and still match.
func TestRuntimeGetsWhatRenderSaid(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	roster := testRoster(t)
	resolve := spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{
		Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")},
		Search:  []string{"mesh.internal", "hub.mesh.internal"},
		Options: []string{"ndots:1"},
	}}
	for _, tc := range []struct {
		name string
		mode spec.Mode
	}{
		{"copy", spec.Mode{Names: spec.Copy}},
		{"resolve", resolve},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sleeper(tc.name)
			c.Command = []string{"sleep", "300"}
			r := render(t, h, c, roster, tc.mode)
			id := createStarted(t, rt, withDigest(r))

			hosts := h.Exec(id, "cat", "/etc/hosts")
			lines := strings.Split(hosts, "\n")
			want := r.HostsLines()
			if len(lines) < len(want) || !cmp.Equal(lines[:len(want)], want) {
				t.Errorf("/etc/hosts starts with\n%s\nwant\n%s\n(whole file:\n%s)", strings.Join(lines[:min(len(want), len(lines))], "\n"), strings.Join(want, "\n"), hosts)
			}
			for name := range roster.Names {
				if tc.mode.Names == spec.Resolve && strings.Contains(hosts, name) {
					t.Errorf("resolve mode: /etc/hosts names %s; want no copied names:\n%s", name, hosts)
				}
			}
			if tc.mode.Names == spec.Copy && len(want) != 5 {
				t.Errorf("copy mode rendered %d hosts lines, want 5 (4 names, one with v4 and v6)", len(want))
			}

			resolv := h.Exec(id, "cat", "/etc/resolv.conf")
			if tc.mode.Names == spec.Resolve {
				if got, want := strings.TrimRight(resolv, "\n"), strings.TrimRight(r.ResolvConf(), "\n"); got != want {
					t.Errorf("/etc/resolv.conf =\n%s\nwant (Rendered.ResolvConf)\n%s", got, want)
				}
			} else if strings.Contains(resolv, "10.88.0.1") && strings.Contains(resolv, "ndots:1") {
				t.Errorf("copy mode: /etc/resolv.conf carries resolve mode's settings:\n%s", resolv)
			}

			list, err := rt.List(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			var o *reconcile.Observed
			for i := range list {
				if list[i].ID == id {
					o = &list[i]
				}
			}
			if o == nil {
				t.Fatalf("List() has no container %s", id)
			}
			if o.Name != r.Name || o.State != reconcile.StateRunning || o.StartedAt.IsZero() || o.Image != r.Image {
				t.Errorf("List() reports %+v; want name %s, running, started, image %s", *o, r.Name, r.Image)
			}
			label := o.Labels[digest.LabelDigest]
			if ok, err := testKey.Matches(label, r); !ok || err != nil {
				t.Errorf("testKey.Matches(%q, rendered) = %v, %v; want true", label, ok, err)
			}
			if label != testKey.Of(r) {
				t.Errorf("digest label = %q, want %q", label, testKey.Of(r))
			}
			rec, err := digest.ParseRecord(o.Labels[digest.LabelRecord])
			if err != nil {
				t.Fatal(err)
			}
			// The record carries the user's labels only; meshhost's own (the
			// test label among them) stay out of it.
			want2 := r
			want2.Labels = nil
			if diff := cmp.Diff(want2, rec, cmpOpts); diff != "" {
				t.Errorf("ParseRecord(record label) differs from the rendered container (-rendered +record):\n%s", diff)
			}
		})
	}
}
