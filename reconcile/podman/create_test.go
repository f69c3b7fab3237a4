package podman

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

// TestSpecGenerator checks the create request without podman: each name mode
// gives podman its settings and nothing of the other mode's.
func TestSpecGenerator(t *testing.T) {
	a := netip.MustParseAddr
	roster := &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{"b.mesh": {a("10.0.0.2"), a("fd00::2")}, "a.mesh": {a("10.0.0.1")}}}
	c := spec.Container{
		Name: "x", Image: "img", StopSignal: "int", StopTimeout: 1500 * time.Millisecond,
		Restart:   spec.RestartPolicy{Name: "on-failure", MaxRetries: 2},
		Resources: spec.Resources{MemoryBytes: 1 << 20, MilliCPUs: 250},
		Mounts:    []spec.Mount{{Type: spec.MountBind, Source: "/h", Target: "/c", ReadOnly: true}, {Type: spec.MountTmpfs, Target: "/t"}, {Type: spec.MountVolume, Source: "v", Target: "/v"}},
		Networks:  []spec.NetworkAttachment{{Name: "n", Aliases: []string{"al"}, IPv4: a("10.1.0.5"), IPv6: a("fd01::5")}},
	}
	copyR, err := spec.Render(c, roster, spec.Mode{Names: spec.Copy})
	if err != nil {
		t.Fatal(err)
	}
	s, err := specGenerator(copyR)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.mesh:10.0.0.1", "b.mesh:10.0.0.2", "b.mesh:fd00::2"}; !cmp.Equal(s.HostAdd, want) {
		t.Errorf("copy mode HostAdd = %q, want %q", s.HostAdd, want)
	}
	if len(s.DNSServers)+len(s.DNSSearch)+len(s.DNSOptions) != 0 {
		t.Errorf("copy mode sets DNS: %v %v %v", s.DNSServers, s.DNSSearch, s.DNSOptions)
	}
	if *s.StopSignal != syscall.SIGINT || *s.StopTimeout != 2 || s.RestartPolicy != "on-failure" || *s.RestartRetries != 2 {
		t.Errorf("stop %v/%v, restart %s:%v; want SIGINT/2s (rounded up), on-failure:2", *s.StopSignal, *s.StopTimeout, s.RestartPolicy, *s.RestartRetries)
	}
	if l := s.ResourceLimits; *l.Memory.Limit != 1<<20 || *l.CPU.Quota != 25000 || *l.CPU.Period != 100000 || l.Pids.Limit != -1 {
		t.Errorf("resources %+v; want memory 1 MiB, quota 25000/100000, pids unlimited", l)
	}
	if len(s.Volumes) != 1 || s.Volumes[0].Name != "v" || len(s.Mounts) != 2 || s.Mounts[0].Options[1] != "ro" {
		t.Errorf("volumes %+v, mounts %+v", s.Volumes, s.Mounts)
	}
	if n := s.Networks["n"]; len(n.StaticIPs) != 2 || n.StaticIPs[0].String() != "10.1.0.5" || n.StaticIPs[1].String() != "fd01::5" || n.Aliases[0] != "al" {
		t.Errorf("networks %+v", s.Networks)
	}

	resolveR, err := spec.Render(c, nil, spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{Servers: []netip.Addr{a("10.88.0.1")}, Search: []string{"mesh"}, Options: []string{"ndots:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err = specGenerator(resolveR)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.HostAdd) != 0 || len(s.DNSServers) != 1 || s.DNSServers[0].String() != "10.88.0.1" || s.DNSSearch[0] != "mesh" || s.DNSOptions[0] != "ndots:1" {
		t.Errorf("resolve mode: hosts %q, dns %v %q %q", s.HostAdd, s.DNSServers, s.DNSSearch, s.DNSOptions)
	}
}

// TestEntrypointFromPathAndArgs pins the podman 4 quirk: Config.Entrypoint
// comes split on spaces; Path and Args less Cmd give it back exactly.
func TestEntrypointFromPathAndArgs(t *testing.T) {
	for _, tc := range []struct {
		d    define.InspectContainerData
		want []string
	}{
		{define.InspectContainerData{Path: "/bin/sh", Args: []string{"-c", "echo a  b", "x y"},
			Config: &define.InspectContainerConfig{Entrypoint: []string{"/bin/sh", "-c", "echo", "a", "", "b"}, Cmd: []string{"x y"}}},
			[]string{"/bin/sh", "-c", "echo a  b"}},
		{define.InspectContainerData{Path: "sleep", Args: []string{"300"},
			Config: &define.InspectContainerConfig{Entrypoint: []string{""}, Cmd: []string{"sleep", "300"}}}, nil},
		{define.InspectContainerData{Path: "/init", Args: nil,
			Config: &define.InspectContainerConfig{Entrypoint: []string{"/init"}}}, []string{"/init"}},
	} {
		if got := entrypoint(&tc.d); !cmp.Equal(got, tc.want) {
			t.Errorf("entrypoint(Path %q, Args %q, Cmd %q) = %q, want %q", tc.d.Path, tc.d.Args, tc.d.Config.Cmd, got, tc.want)
		}
	}
}
