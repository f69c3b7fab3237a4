package podman

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/containers/podman/v5/pkg/signal"
	"github.com/containers/podman/v5/pkg/specgen"
	"github.com/opencontainers/runtime-spec/specs-go"
	nettypes "go.podman.io/common/libnetwork/types"
	"go.podman.io/image/v5/manifest"

	"github.com/meshhost/meshhost/spec"
)

// cpuPeriod is the CFS period podman uses for --cpus, in microseconds.
const cpuPeriod = 100_000

// specGenerator returns the podman create request for r: every setting of r,
// and nothing else but what podman requires (the bridge network mode, or
// the host's for a container on spec.HostNetwork).
// Settings r leaves at zero are left to podman and the image, except the
// pids limit, which is unlimited as spec says (podman's default is 2048).
func specGenerator(r spec.Rendered) (*specgen.SpecGenerator, error) {
	s := specgen.NewSpecGenerator(r.Image, false)
	s.Name = r.Name
	s.Command = slices.Clone(r.Command)
	s.Entrypoint = slices.Clone(r.Entrypoint)
	s.Env = maps.Clone(r.Env)
	s.WorkDir = r.WorkingDir
	s.User = r.User
	s.Labels = maps.Clone(r.Labels)

	for _, p := range r.Ports {
		m := nettypes.PortMapping{ContainerPort: p.ContainerPort, HostPort: p.HostPort, Protocol: p.Protocol}
		if p.HostIP.IsValid() {
			m.HostIP = p.HostIP.String()
		}
		s.PortMappings = append(s.PortMappings, m)
	}

	for _, m := range r.Mounts {
		var opts []string
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		switch m.Type {
		case spec.MountVolume:
			s.Volumes = append(s.Volumes, &specgen.NamedVolume{Name: m.Source, Dest: m.Target, Options: opts})
		case spec.MountBind:
			s.Mounts = append(s.Mounts, specs.Mount{Type: "bind", Source: m.Source, Destination: m.Target, Options: append([]string{"rbind"}, opts...)})
		case spec.MountTmpfs:
			s.Mounts = append(s.Mounts, specs.Mount{Type: "tmpfs", Source: "tmpfs", Destination: m.Target, Options: opts})
		default:
			return nil, fmt.Errorf("mount %s: unknown type %q", m.Target, m.Type)
		}
	}

	s.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	s.Networks = map[string]nettypes.PerNetworkOptions{}
	if r.OnHostNetwork() {
		// The host's namespace, not a network: spec refuses it with any
		// other network, aliases or static addresses.
		s.NetNS = specgen.Namespace{NSMode: specgen.Host}
		s.Networks = nil
	}
	for _, n := range r.Networks {
		if n.Name == spec.HostNetwork {
			continue
		}
		o := nettypes.PerNetworkOptions{Aliases: slices.Clone(n.Aliases)}
		for _, a := range []netip.Addr{n.IPv4, n.IPv6} {
			if a.IsValid() {
				o.StaticIPs = append(o.StaticIPs, net.IP(a.AsSlice()))
			}
		}
		s.Networks[n.Name] = o
	}

	if r.Restart.Name != "" {
		s.RestartPolicy = r.Restart.Name
		if r.Restart.Name == "on-failure" && r.Restart.MaxRetries > 0 {
			n := uint(r.Restart.MaxRetries)
			s.RestartRetries = &n
		}
	}

	if r.StopSignal != "" {
		sig, err := signal.ParseSignal(r.StopSignal)
		if err != nil {
			return nil, fmt.Errorf("stop signal %q: %w", r.StopSignal, err)
		}
		s.StopSignal = &sig
	}
	if r.StopTimeout > 0 {
		secs := uint((r.StopTimeout + time.Second - 1) / time.Second)
		s.StopTimeout = &secs
	}

	if h := r.Healthcheck; h != nil {
		s.HealthConfig = &manifest.Schema2HealthConfig{
			Test:        append([]string{"CMD"}, h.Test...),
			Interval:    h.Interval,
			Timeout:     h.Timeout,
			StartPeriod: h.StartPeriod,
			Retries:     h.Retries,
		}
	}

	s.ResourceLimits = createResources(r.Resources)
	s.CapAdd = slices.Clone(r.CapAdd)
	s.CapDrop = slices.Clone(r.CapDrop)

	switch r.Mode {
	case spec.Copy:
		for _, h := range r.Hosts {
			s.HostAdd = append(s.HostAdd, h.Name+":"+h.Addr.String())
		}
	case spec.Resolve:
		for _, a := range r.DNS.Servers {
			s.DNSServers = append(s.DNSServers, net.IP(a.AsSlice()))
		}
		s.DNSSearch = slices.Clone(r.DNS.Search)
		s.DNSOptions = slices.Clone(r.DNS.Options)
	}
	if len(r.Hosts) > 0 && r.Mode != spec.Copy {
		return nil, fmt.Errorf("hosts entries in %q mode; only copy mode copies names", r.Mode)
	}
	return s, nil
}

// createResources is res for podman create: an absent limit is no limit,
// except pids, where podman applies containers.conf's pids_limit unless told
// -1.
func createResources(res spec.Resources) *specs.LinuxResources {
	l := &specs.LinuxResources{}
	if res.MemoryBytes > 0 {
		mem := res.MemoryBytes
		l.Memory = &specs.LinuxMemory{Limit: &mem}
	}
	if res.MilliCPUs > 0 {
		quota, period := res.MilliCPUs*cpuPeriod/1000, uint64(cpuPeriod)
		l.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	pids := int64(-1)
	if res.PidsLimit > 0 {
		pids = res.PidsLimit
	}
	l.Pids = &specs.LinuxPids{Limit: pids}
	return l
}
