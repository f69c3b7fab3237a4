package podman

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containers/podman/v5/libpod/define"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// inspected maps podman's inspect report to reconcile's vocabulary.
func inspected(d *define.InspectContainerData) reconcile.Inspected {
	in := reconcile.Inspected{
		Observed: reconcile.Observed{
			ID:    d.ID,
			Name:  d.Name,
			Image: d.ImageName,
		},
		Settings: settings(d),
	}
	if d.BoundingCaps != nil {
		in.Capabilities = slices.Sorted(slices.Values(d.BoundingCaps))
	}
	if c := d.Config; c != nil {
		in.Labels = c.Labels
		if c.Image != "" {
			in.Image = c.Image
		}
	}
	if st := d.State; st != nil {
		in.State = state(st.Status)
		in.StartedAt = realTime(st.StartedAt)
		in.FinishedAt = realTime(st.FinishedAt)
		if st.Health != nil {
			in.Health = health(st.Health.Status, in.Settings.Healthcheck != nil)
		}
	}
	if in.Health == reconcile.HealthNone && in.Settings.Healthcheck != nil {
		in.Health = reconcile.HealthStarting
	}
	return in
}

// realTime is t, or the zero time for podman's "never" (year 1, or the Unix
// epoch some versions write).
func realTime(t time.Time) time.Time {
	if t.Year() <= 1970 {
		return time.Time{}
	}
	return t
}

func state(s string) reconcile.State {
	switch s {
	case "created", "configured", "initialized":
		return reconcile.StateCreated
	case "running", "stopping":
		return reconcile.StateRunning
	case "exited", "stopped":
		return reconcile.StateExited
	case "paused":
		return reconcile.StatePaused
	case "removing":
		// A removal began and was cut short (see reconcile.StateRemoving):
		// podman 4.3 and 5 alike refuse to start, stop or inspect it.
		return reconcile.StateRemoving
	}
	return reconcile.StateUnknown
}

func health(s string, hasCheck bool) reconcile.Health {
	switch s {
	case "healthy":
		return reconcile.HealthHealthy
	case "unhealthy":
		return reconcile.HealthUnhealthy
	case "starting":
		return reconcile.HealthStarting
	}
	if hasCheck {
		return reconcile.HealthStarting
	}
	return reconcile.HealthNone
}

// settings maps podman's inspect report back to a spec.Rendered, reporting
// what podman reports (see the package doc for what podman adds).
func settings(d *define.InspectContainerData) spec.Rendered {
	r := spec.Rendered{Mode: spec.Copy}
	r.Name = d.Name
	c := d.Config
	if c == nil {
		c = &define.InspectContainerConfig{}
	}
	hc := d.HostConfig
	if hc == nil {
		hc = &define.InspectContainerHostConfig{}
	}

	r.Image = cmp.Or(c.Image, d.ImageName)
	r.Command = nilIfEmpty(c.Cmd)
	r.Entrypoint = entrypoint(d)
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if r.Env == nil {
			r.Env = map[string]string{}
		}
		r.Env[k] = v
	}
	r.WorkingDir = c.WorkingDir
	r.User = c.User
	if len(c.Labels) > 0 {
		r.Labels = c.Labels
	}

	for key, bindings := range hc.PortBindings {
		port, proto, _ := strings.Cut(key, "/")
		cp, _ := strconv.ParseUint(port, 10, 16)
		for _, b := range bindings {
			p := spec.Port{ContainerPort: uint16(cp), Protocol: cmp.Or(proto, spec.DefaultProtocol)}
			if a, err := netip.ParseAddr(b.HostIP); err == nil && !a.IsUnspecified() {
				p.HostIP = a
			}
			hp, _ := strconv.ParseUint(b.HostPort, 10, 16)
			p.HostPort = uint16(hp)
			r.Ports = append(r.Ports, p)
		}
	}
	slices.SortFunc(r.Ports, func(a, b spec.Port) int {
		return cmp.Or(cmp.Compare(a.ContainerPort, b.ContainerPort), cmp.Compare(a.Protocol, b.Protocol),
			a.HostIP.Compare(b.HostIP), cmp.Compare(a.HostPort, b.HostPort))
	})

	seen := map[string]bool{}
	for _, m := range d.Mounts {
		switch m.Type {
		case "volume":
			r.Mounts = append(r.Mounts, spec.Mount{Type: spec.MountVolume, Source: m.Name, Target: m.Destination, ReadOnly: !m.RW})
		case "bind":
			r.Mounts = append(r.Mounts, spec.Mount{Type: spec.MountBind, Source: m.Source, Target: m.Destination, ReadOnly: !m.RW})
		case "tmpfs":
			r.Mounts = append(r.Mounts, spec.Mount{Type: spec.MountTmpfs, Target: m.Destination, ReadOnly: !m.RW})
		default:
			continue
		}
		seen[m.Destination] = true
	}
	for target, opts := range hc.Tmpfs { // podman 4 reports tmpfs here only
		if !seen[target] {
			r.Mounts = append(r.Mounts, spec.Mount{Type: spec.MountTmpfs, Target: target, ReadOnly: slices.Contains(strings.Split(opts, ","), "ro")})
		}
	}
	slices.SortFunc(r.Mounts, func(a, b spec.Mount) int { return cmp.Compare(a.Target, b.Target) })

	if ns := d.NetworkSettings; ns != nil {
		short := d.ID[:min(12, len(d.ID))]
		for name, n := range ns.Networks {
			if n == nil {
				continue
			}
			na := spec.NetworkAttachment{Name: name}
			for _, a := range n.Aliases {
				if a != short && a != d.ID {
					na.Aliases = append(na.Aliases, a)
				}
			}
			slices.Sort(na.Aliases)
			na.IPv4, _ = netip.ParseAddr(n.IPAddress)
			na.IPv6, _ = netip.ParseAddr(n.GlobalIPv6Address)
			r.Networks = append(r.Networks, na)
		}
		slices.SortFunc(r.Networks, func(a, b spec.NetworkAttachment) int { return cmp.Compare(a.Name, b.Name) })
	}
	if hc.NetworkMode == "host" {
		// Podman reports no networks for the host's namespace.
		r.Networks = []spec.NetworkAttachment{{Name: spec.HostNetwork}}
	}

	r.Restart = spec.RestartPolicy{Name: "no"}
	if rp := hc.RestartPolicy; rp != nil && rp.Name != "" {
		r.Restart = spec.RestartPolicy{Name: rp.Name, MaxRetries: int(rp.MaximumRetryCount)}
	}
	r.StopSignal = spec.CanonicalSignal(c.StopSignal)
	r.StopTimeout = time.Duration(c.StopTimeout) * time.Second

	if h := c.Healthcheck; h != nil && len(h.Test) > 0 && h.Test[0] != "NONE" {
		test := h.Test
		if test[0] == "CMD" {
			test = test[1:] // spec's healthcheck is exec form; CMD-SHELL stays visible as such
		}
		r.Healthcheck = &spec.Healthcheck{
			Test:        slices.Clone(test),
			Interval:    h.Interval,
			Timeout:     h.Timeout,
			StartPeriod: h.StartPeriod,
			Retries:     h.Retries,
		}
	}

	r.Resources.MemoryBytes = max(hc.Memory, 0)
	if hc.CpuQuota > 0 && hc.CpuPeriod > 0 {
		r.Resources.MilliCPUs = hc.CpuQuota * 1000 / int64(hc.CpuPeriod)
	}
	r.Resources.PidsLimit = max(hc.PidsLimit, 0)
	r.CapAdd = nilIfEmpty(hc.CapAdd)
	r.CapDrop = nilIfEmpty(hc.CapDrop)

	for _, h := range hc.ExtraHosts {
		name, addr, _ := strings.Cut(h, ":")
		if a, err := netip.ParseAddr(addr); err == nil {
			r.Hosts = append(r.Hosts, spec.HostEntry{Name: name, Addr: a})
		}
	}
	if len(hc.Dns) > 0 {
		r.Mode = spec.Resolve
		for _, s := range hc.Dns {
			if a, err := netip.ParseAddr(s); err == nil {
				r.DNS.Servers = append(r.DNS.Servers, a)
			}
		}
		r.DNS.Search = nilIfEmpty(hc.DnsSearch)
		r.DNS.Options = nilIfEmpty(hc.DnsOptions)
	}
	return r
}

// entrypoint rebuilds the container's entrypoint exactly. Podman 4's API
// reports Config.Entrypoint as one space-joined string (which the v5
// bindings split on spaces), but Path and Args are the whole process
// argument list: the entrypoint followed by Cmd.
func entrypoint(d *define.InspectContainerData) []string {
	var cmdArgs []string
	if d.Config != nil {
		cmdArgs = d.Config.Cmd
		if len(d.Config.Entrypoint) == 0 || len(d.Config.Entrypoint) == 1 && d.Config.Entrypoint[0] == "" {
			return nil
		}
	}
	argv := append([]string{d.Path}, d.Args...)
	if d.Path == "" || len(argv) < len(cmdArgs) || !slices.Equal(argv[len(argv)-len(cmdArgs):], cmdArgs) {
		if d.Config != nil { // not the expected shape: take what Config says
			return nilIfEmpty(d.Config.Entrypoint)
		}
		return nil
	}
	return nilIfEmpty(argv[:len(argv)-len(cmdArgs)])
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}
