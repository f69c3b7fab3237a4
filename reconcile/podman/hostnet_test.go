package podman

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// TestHostNetworkContainer: a container declared on the host's network
// (networks [{name: host}], podman's --network host) is created through the
// reconciler in the host's namespace: in copy mode with the roster as its
// hosts lines, in resolve mode with the loopback resolver as its only
// nameserver. Podman 4.3 used to fail every pass on it ("unable to find
// network with name or ID host"). Inspect reads it back as declared, so a
// pass after each change keeps it; the mode change replaces it once.
//
// Network safety: the container only sleeps; it sends nothing, and binds
// nothing in the host's namespace it shares. The resolver address is
// written into its resolv.conf, never asked.
func TestHostNetworkContainer(t *testing.T) {
	rt, h := newRuntime(t)
	trt := scoped(rt, h.Prefix())
	r := newReconciler(t, trt, nil)
	c := sleeper("edge")
	c.Networks = []spec.NetworkAttachment{{Name: spec.HostNetwork}}
	name := h.Name("edge")
	roster := &spec.Roster{Generation: 1, Zones: []string{"mesh"}, Names: map[string][]netip.Addr{
		"foo.mesh": {netip.MustParseAddr("10.1.2.3")},
		"bar.mesh": {netip.MustParseAddr("10.1.2.4")},
	}}
	lo := netip.MustParseAddr("127.53.53.53") // migrations.DefaultLoopback, as the host network's probe proves it
	resolve := spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{Servers: []netip.Addr{lo}, Options: []string{"ndots:1"}}}

	// Copy mode.
	desired := []spec.Rendered{render(t, h, c, roster, spec.Mode{Names: spec.Copy})}
	res := mustReconcile(t, r, desired)
	if res.Count(reconcile.Create) != 1 || res.Outcomes[0].Err != nil {
		t.Fatalf("first pass: %v, want one create", outcomes(res))
	}
	id := res.Outcomes[0].NewID
	if mode := strings.TrimSpace(h.MustPodman("inspect", "--format", "{{.HostConfig.NetworkMode}}", id)); mode != "host" {
		t.Errorf("network mode = %q, want host", mode)
	}
	hosts := h.Exec(id, "cat", "/etc/hosts")
	for _, line := range []string{"10.1.2.3\tfoo.mesh", "10.1.2.4\tbar.mesh"} {
		if !strings.Contains(hosts, line) {
			t.Errorf("copy mode: /etc/hosts lacks %q:\n%s", line, hosts)
		}
	}
	if got, err := rt.Inspect(ctx(t), id); err != nil {
		t.Fatal(err)
	} else if !got.Settings.OnHostNetwork() || len(got.Settings.Networks) != 1 {
		t.Errorf("Inspect: networks %+v, want the host's only", got.Settings.Networks)
	}
	if res := mustReconcile(t, r, desired); res.Count(reconcile.Keep) != 1 {
		t.Errorf("second copy-mode pass: %v, want keep", outcomes(res))
	}

	// Resolve mode: one replacement, then kept.
	desired = []spec.Rendered{render(t, h, c, nil, resolve)}
	res = mustReconcile(t, r, desired)
	if res.Count(reconcile.Replace) != 1 || res.Outcomes[0].Err != nil {
		t.Fatalf("switch to resolve mode: %v, want one replace", outcomes(res))
	}
	id = res.Outcomes[0].NewID
	conf := h.Exec(id, "cat", "/etc/resolv.conf")
	var servers []string
	for _, line := range strings.Split(conf, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			servers = append(servers, f[1])
		}
	}
	if len(servers) != 1 || servers[0] != lo.String() {
		t.Errorf("resolve mode: nameservers %v, want only %s:\n%s", servers, lo, conf)
	}
	if hosts := h.Exec(id, "cat", "/etc/hosts"); strings.Contains(hosts, "foo.mesh") {
		t.Errorf("resolve mode: /etc/hosts still carries a copied name:\n%s", hosts)
	}
	if res := mustReconcile(t, r, desired); res.Count(reconcile.Keep) != 1 {
		t.Errorf("second resolve-mode pass: %v, want keep", outcomes(res))
	}

	res = mustReconcile(t, r, nil)
	if res.Count(reconcile.Remove) != 1 {
		t.Errorf("no longer declared: %v, want remove", outcomes(res))
	}
	if m := byName(t, trt); len(m) != 0 {
		t.Errorf("after the removal: %v, want none (%s)", m, name)
	}
}
