package podman

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// TestInspectReportsWhatWasCreated creates a container using every field
// spec has, on a test network with an alias and static addresses, and checks
// field by field that Inspect maps podman's report back to what was
// declared; then a container declaring nothing, for what podman adds.
func TestInspectReportsWhatWasCreated(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t, RunHealthchecks())
	netName := h.Network("net", "--ipv6")
	nets, err := rt.Networks(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ipv4, ipv6 netip.Addr
	for _, n := range nets {
		if n.Name != netName {
			continue
		}
		for _, s := range n.Subnets {
			// The gateway plus 9: inside the subnet, not the gateway.
			a := s.Gateway
			for range 9 {
				a = a.Next()
			}
			if s.Prefix.Addr().Is4() {
				ipv4 = a
			} else {
				ipv6 = a
			}
		}
		if !n.DNSEnabled || !n.IPv6 || n.Driver != "bridge" {
			t.Errorf("Networks() reports %+v; want a DNS-enabled IPv6 bridge", n)
		}
	}
	if !ipv4.IsValid() || !ipv6.IsValid() {
		t.Fatalf("Networks() = %+v; want %s with a v4 and a v6 subnet", nets, netName)
	}

	bindDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(bindDir, "f"), []byte("bound\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := spec.Container{
		Name: "full",
		// Arguments with spaces: podman 4 reports the entrypoint as one
		// space-joined string.
		Entrypoint: []string{"/bin/sh", "-c", `echo "a  b"; exec sleep "$0"`},
		Command:    []string{"300"},
		Env:        map[string]string{"FOO": "bar", "SPACED": "a b=c"},
		WorkingDir: "/tmp",
		User:       "1000:1000",
		Labels:     map[string]string{"org.example.role": "db"},
		Ports:      []spec.Port{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: freePort(t), ContainerPort: 80}, {HostPort: freePort(t), ContainerPort: 53, Protocol: "udp"}},
		Mounts: []spec.Mount{
			{Type: spec.MountVolume, Source: h.Name("data"), Target: "/data"},
			{Type: spec.MountVolume, Source: h.Name("conf"), Target: "/conf", ReadOnly: true},
			{Type: spec.MountBind, Source: bindDir, Target: "/bind", ReadOnly: true},
			{Type: spec.MountBind, Source: bindDir, Target: "/bind-rw"},
			{Type: spec.MountTmpfs, Target: "/scratch"},
			{Type: spec.MountTmpfs, Target: "/scratch-ro", ReadOnly: true},
		},
		Networks:    []spec.NetworkAttachment{{Name: netName, Aliases: []string{"db", "postgres"}, IPv4: ipv4, IPv6: ipv6}},
		Restart:     spec.RestartPolicy{Name: "on-failure", MaxRetries: 3},
		StopSignal:  "SIGINT",
		StopTimeout: 42 * time.Second,
		// Every timing differs from podman's default (30s timeout), so each
		// round trip shows; the timeout is long for the check to pass on a
		// loaded machine.
		Healthcheck: &spec.Healthcheck{Test: []string{"sh", "-c", "test -d /data"}, Interval: 5 * time.Second, Timeout: 25 * time.Second, StartPeriod: time.Second, Retries: 2},
		Resources:   spec.Resources{MemoryBytes: 64 << 20, MilliCPUs: 500, PidsLimit: 100},
		CapAdd:      []string{"NET_ADMIN"},
		CapDrop:     []string{"CHOWN", "MKNOD"},
	}
	resolve := spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{Servers: []netip.Addr{ipv4}, Search: []string{"mesh.internal"}, Options: []string{"ndots:1"}}}
	want := render(t, h, c, nil, resolve)
	id := createStarted(t, rt, want)

	if got := h.Exec(id, "cat", "/bind/f"); got != "bound\n" {
		t.Errorf("the bind mount reads %q, want %q", got, "bound\n")
	}
	in, err := rt.Inspect(ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	got := in.Settings
	for _, f := range []struct {
		field string
		get   func(spec.Rendered) any
	}{
		{"name", func(r spec.Rendered) any { return r.Name }},
		{"image", func(r spec.Rendered) any { return r.Image }},
		{"entrypoint", func(r spec.Rendered) any { return r.Entrypoint }},
		{"command", func(r spec.Rendered) any { return r.Command }},
		{"working_dir", func(r spec.Rendered) any { return r.WorkingDir }},
		{"user", func(r spec.Rendered) any { return r.User }},
		{"labels", func(r spec.Rendered) any { return r.Labels }},
		{"ports", func(r spec.Rendered) any { return r.Ports }},
		{"mounts", func(r spec.Rendered) any { return r.Mounts }},
		{"networks", func(r spec.Rendered) any { return r.Networks }},
		{"restart", func(r spec.Rendered) any { return r.Restart }},
		{"stop_signal", func(r spec.Rendered) any { return r.StopSignal }},
		{"stop_timeout", func(r spec.Rendered) any { return r.StopTimeout }},
		{"healthcheck", func(r spec.Rendered) any { return r.Healthcheck }},
		{"resources", func(r spec.Rendered) any { return r.Resources }},
		// cap_add, cap_drop: podman reports them against its default set,
		// checked below.
		{"hosts", func(r spec.Rendered) any { return r.Hosts }},
		{"dns", func(r spec.Rendered) any { return r.DNS }},
		{"mode", func(r spec.Rendered) any { return r.Mode }},
		// env: podman adds its own, checked below.
	} {
		if diff := cmp.Diff(f.get(want), f.get(got), cmpOpts); diff != "" {
			t.Errorf("Inspect: %s differs from what was created (-created +inspected):\n%s", f.field, diff)
		}
		if m, ok := spec.MutabilityOf(f.field); !ok && f.field != "mode" || m == spec.OrderOnly {
			t.Errorf("field %q: spec.Fields says %q, %v", f.field, m, ok)
		}
	}
	// Capabilities: every declared add held, every declared drop not; what
	// podman reports as added or dropped was declared. Podman 4.3 reports
	// the declaration exactly; podman 5's default set lacks MKNOD, so it
	// does not report that drop (reconcile's adoption judges by what is
	// held, see Inspected.Capabilities).
	if in.Capabilities == nil {
		t.Errorf("Inspect: no capabilities held reported")
	}
	for _, c := range want.CapAdd {
		if !slices.Contains(in.Capabilities, c) {
			t.Errorf("Inspect: declared cap_add %s not held: %v", c, in.Capabilities)
		}
	}
	for _, c := range want.CapDrop {
		if slices.Contains(in.Capabilities, c) {
			t.Errorf("Inspect: declared cap_drop %s held: %v", c, in.Capabilities)
		}
	}
	for _, f := range []struct {
		field         string
		got, declared []string
	}{{"cap_add", got.CapAdd, want.CapAdd}, {"cap_drop", got.CapDrop, want.CapDrop}} {
		for _, c := range f.got {
			if !slices.Contains(f.declared, c) {
				t.Errorf("Inspect: %s reports %s, which was not declared (%v)", f.field, c, f.declared)
			}
		}
	}
	if v := podmantest.Version(t); v.Major < 5 && !cmp.Equal(got.CapDrop, want.CapDrop) {
		t.Errorf("podman %s: Inspect: cap_drop %v, want %v as created", v, got.CapDrop, want.CapDrop)
	}

	for k, v := range want.Env {
		if got.Env[k] != v {
			t.Errorf("Inspect: env %s = %q, want %q", k, got.Env[k], v)
		}
	}
	var added []string
	for k := range got.Env {
		if _, ok := want.Env[k]; !ok {
			added = append(added, k)
		}
	}
	slices.Sort(added)
	// Podman 4 adds containers.conf's default TERM; podman 5 dropped it from
	// its defaults and sets HOME.
	wantAdded := []string{"HOSTNAME", "PATH", "TERM", "container"}
	if v := podmantest.Version(t); v.Major >= 5 {
		wantAdded = []string{"HOME", "HOSTNAME", "PATH", "container"}
	}
	if !slices.Equal(added, wantAdded) {
		t.Errorf("podman %s added env %v; the package doc lists %v", podmantest.Version(t), added, wantAdded)
	}
	if in.State != reconcile.StateRunning || in.StartedAt.IsZero() || !in.FinishedAt.IsZero() || in.ID != id || in.Name != want.Name {
		t.Errorf("Inspect: %+v; want running, started, not finished, id %s, name %s", in.Observed, id, want.Name)
	}
	if in.Health != reconcile.HealthHealthy {
		t.Errorf("Inspect: health %q, want %q (RunHealthchecks runs the check)", in.Health, reconcile.HealthHealthy)
	}
	if n := rt.Calls()["Healthcheck"]; n != 1 {
		t.Errorf("Calls()[Healthcheck] = %d, want 1", n)
	}

	t.Run("defaults", func(t *testing.T) {
		r := render(t, h, sleeper("plain"), testRoster(t), spec.Mode{Names: spec.Copy})
		id, err := rt.Create(ctx(t), r)
		if err != nil {
			t.Fatal(err)
		}
		in, err := rt.Inspect(ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		got := in.Settings
		if in.State != reconcile.StateCreated || !in.StartedAt.IsZero() || in.Health != reconcile.HealthNone {
			t.Errorf("Inspect of a created container: %+v, health %q; want created, never started, no health", in.Observed, in.Health)
		}
		// What podman adds or reports for a container that declares nothing:
		// the default network (no address before it starts), the default
		// stop signal and timeout, restart "no", no limits (pids: unlimited,
		// as Create asks), working dir "/".
		for _, f := range []struct {
			field     string
			got, want any
		}{
			{"networks", got.Networks, []spec.NetworkAttachment{{Name: "podman"}}},
			{"stop_signal", got.StopSignal, "SIGTERM"},
			{"stop_timeout", got.StopTimeout, spec.DefaultStopTimeout},
			{"restart", got.Restart, spec.RestartPolicy{Name: "no"}},
			{"resources", got.Resources, spec.Resources{}},
			{"working_dir", got.WorkingDir, "/"},
			{"entrypoint", got.Entrypoint, []string(nil)},
			{"command", got.Command, r.Command},
			{"hosts", got.Hosts, r.Hosts},
			{"mode", got.Mode, spec.Copy},
			{"mounts", got.Mounts, []spec.Mount(nil)},
			{"cap_add", got.CapAdd, []string(nil)},
			{"healthcheck", got.Healthcheck, (*spec.Healthcheck)(nil)},
		} {
			if diff := cmp.Diff(f.want, f.got, cmpOpts); diff != "" {
				t.Errorf("Inspect of a plain container: %s (-want +got):\n%s", f.field, diff)
			}
		}
		if !strings.HasPrefix(got.Env["PATH"], "/usr/local/sbin") {
			t.Errorf("Inspect: env PATH = %q, want podman's default", got.Env["PATH"])
		}
	})
}

// TestEveryPodmanStateMapped: every state podman's libpod knows maps to a
// reconcile.State other than unknown (a state the planner did not know made
// an agent loop for ever on a container whose removal was cut short), and
// the mapping says what each means to the reconciler.
func TestEveryPodmanStateMapped(t *testing.T) {
	want := map[string]reconcile.State{
		"created":     reconcile.StateCreated, // libpod's Configured
		"initialized": reconcile.StateCreated, // libpod's Created
		"running":     reconcile.StateRunning,
		"stopping":    reconcile.StateRunning, // a stop in progress, or cut short: stop it (again)
		"stopped":     reconcile.StateExited,
		"exited":      reconcile.StateExited,
		"paused":      reconcile.StatePaused,
		"removing":    reconcile.StateRemoving,
		"unknown":     reconcile.StateUnknown,
	}
	for s := define.ContainerStateUnknown; s <= define.ContainerStateStopping; s++ {
		name := s.String()
		w, ok := want[name]
		if !ok {
			t.Errorf("podman state %d (%q) is not in this test's table: map it in state()", s, name)
			continue
		}
		if got := state(name); got != w {
			t.Errorf("state(%q) = %q, want %q", name, got, w)
		}
	}
	if got := (define.ContainerStateStopping + 1).String(); got != "bad state" {
		t.Errorf("podman knows a state after stopping (%q): map it in state() and add it here", got)
	}
}
