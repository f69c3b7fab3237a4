package spec

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// LabelPrefix is reserved for meshhost's own labels; declarations may not use it.
const LabelPrefix = "io.meshhost."

// ParseBytes reads a memory size: a number of bytes with an optional binary
// suffix, as docker and podman do: "1073741824", "512m", "1g", "64Mi".
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1<<10, t[:n-1]
		case 'm':
			mult, t = 1<<20, t[:n-1]
		case 'g':
			mult, t = 1<<30, t[:n-1]
		case 't':
			mult, t = 1<<40, t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a memory size (write e.g. \"512m\" or \"1g\")", s)
	}
	return n * mult, nil
}

// ParseRestartPolicy reads "no", "always", "unless-stopped", "on-failure"
// or "on-failure:N".
func ParseRestartPolicy(s string) (RestartPolicy, error) {
	name, retries, hasRetries := strings.Cut(s, ":")
	switch name {
	case "no", "always", "unless-stopped":
		if !hasRetries {
			return RestartPolicy{Name: name}, nil
		}
	case "on-failure":
		if !hasRetries {
			return RestartPolicy{Name: name}, nil
		}
		n, err := strconv.Atoi(retries)
		if err == nil && n >= 0 {
			return RestartPolicy{Name: name, MaxRetries: n}, nil
		}
	}
	return RestartPolicy{}, fmt.Errorf("%q is not a restart policy; want no, always, unless-stopped, on-failure or on-failure:N", s)
}

// String spells the policy as ParseRestartPolicy reads it.
func (r RestartPolicy) String() string {
	if r.Name == "on-failure" && r.MaxRetries > 0 {
		return r.Name + ":" + strconv.Itoa(r.MaxRetries)
	}
	return r.Name
}

var (
	// containerNameRE is podman's own rule for container names.
	containerNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,252}$`)
	networkNameRE   = containerNameRE
	volumeNameRE    = containerNameRE
	capRE           = regexp.MustCompile(`^(?i)(CAP_)?[A-Z_]+$`)
)

var signals = map[string]bool{
	"SIGHUP": true, "SIGINT": true, "SIGQUIT": true, "SIGKILL": true, "SIGUSR1": true,
	"SIGUSR2": true, "SIGTERM": true, "SIGWINCH": true, "SIGPWR": true, "SIGSTOP": true,
}

func validateContainer(errs *FaultList, p string, c Container) {
	switch {
	case !containerNameRE.MatchString(c.Name):
		errs.Add(p+".name", "%q is not a container name (letters, digits, and _ . - after the first)", c.Name)
	case strings.HasSuffix(c.Name, AsideSuffix):
		errs.Add(p+".name", "%q ends with %q, which meshhost reserves for the old container during a replacement", c.Name, AsideSuffix)
	}
	if c.Image == "" || strings.ContainsAny(c.Image, " \t\r\n") {
		errs.Add(p+".image", "%q is not an image reference", c.Image)
	}
	for _, l := range []struct {
		key  string
		list []string
	}{{"command", c.Command}, {"entrypoint", c.Entrypoint}} {
		tooMany(errs, p+"."+l.key, len(l.list), MaxArgs, "arguments")
	}
	if !tooMany(errs, p+".env", len(c.Env), MaxEnv, "entries") {
		total := 0
		for k, v := range c.Env {
			// Values are never quoted in a fault: they may be secrets.
			switch {
			case k == "" || strings.ContainsAny(k, "=\x00"):
				errs.Add(joinPath(p+".env", k), "an environment variable name may not be empty or hold '=' or NUL")
			case strings.ContainsRune(v, 0):
				errs.Add(joinPath(p+".env", k), "the value holds a NUL byte, which an environment cannot carry (the value is not shown: it may be a secret)")
			}
			n := len(k) + 1 + len(v)
			if n > MaxEnvEntryBytes {
				errs.Add(joinPath(p+".env", k), "%d bytes as NAME=VALUE; at most %d (Linux refuses a longer environment string)", n, MaxEnvEntryBytes)
			}
			total += n
		}
		if total > MaxEnvBytes {
			errs.Add(p+".env", "%d bytes of names and values; at most %d per container", total, MaxEnvBytes)
		}
	}
	if !tooMany(errs, p+".labels", len(c.Labels), MaxLabels, "labels") {
		total := 0
		for k, v := range c.Labels {
			switch {
			case k == "":
				errs.Add(p+".labels", "a label key may not be empty")
			case strings.HasPrefix(k, LabelPrefix):
				errs.Add(joinPath(p+".labels", k), "labels under %q are meshhost's own; use another key", LabelPrefix)
			}
			total += len(k) + len(v)
		}
		if total > MaxLabelBytes {
			errs.Add(p+".labels", "%d bytes of keys and values; at most %d per container", total, MaxLabelBytes)
		}
	}
	tooMany(errs, p+".ports", len(c.Ports), MaxPorts, "ports")
	tooMany(errs, p+".mounts", len(c.Mounts), MaxMounts, "mounts")
	tooMany(errs, p+".networks", len(c.Networks), MaxNetworks, "networks")
	tooMany(errs, p+".depends_on", len(c.DependsOn), MaxDependsOn, "names")
	if h := c.Healthcheck; h != nil {
		tooMany(errs, p+".healthcheck.test", len(h.Test), MaxArgs, "arguments")
	}
	// Past a limit, the entries of a list are not checked one by one: a
	// fault per entry would bury the one that matters.
	ports, mounts, networks := c.Ports, c.Mounts, c.Networks
	if len(ports) > MaxPorts {
		ports = nil
	}
	if len(mounts) > MaxMounts {
		mounts = nil
	}
	if len(networks) > MaxNetworks {
		networks = nil
	}
	// Host ports published twice, here or by another container, are
	// hostClaims'.
	for i, port := range ports {
		pp := fmt.Sprintf("%s.ports[%d]", p, i)
		switch port.Protocol {
		case "", "tcp", "udp", "sctp":
		default:
			errs.Add(pp+".protocol", "%q is not tcp, udp or sctp", port.Protocol)
		}
		if port.ContainerPort == 0 {
			errs.Add(pp+".container_port", "must be 1 to 65535")
		}
	}
	targets := map[string]int{}
	for i, m := range mounts {
		mp := fmt.Sprintf("%s.mounts[%d]", p, i)
		switch m.Type {
		case MountVolume:
			if !volumeNameRE.MatchString(m.Source) {
				errs.Add(mp+".source", "%q is not a volume name", m.Source)
			}
		case MountBind:
			if !path.IsAbs(m.Source) {
				errs.Add(mp+".source", "%q is not an absolute host path", m.Source)
			}
		case MountTmpfs:
			if m.Source != "" {
				errs.Add(mp+".source", "a tmpfs mount has no source")
			}
		default:
			errs.Add(mp+".type", "%q is not volume, bind or tmpfs", m.Type)
		}
		if !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target {
			errs.Add(mp+".target", "%q is not a clean absolute path", m.Target)
		}
		if j, dup := targets[m.Target]; dup {
			errs.Add(mp+".target", "%q is also the target of mounts[%d]", m.Target, j)
		}
		targets[m.Target] = i
	}
	nets := map[string]int{}
	validateHostNetwork(errs, p, c, networks, ports)
	for i, n := range networks {
		np := fmt.Sprintf("%s.networks[%d]", p, i)
		if fix, mode := networkModes[n.Name]; mode {
			errs.Add(np+".name", "%q is a podman network mode, not a network: %s", n.Name, fix)
		} else if !networkNameRE.MatchString(n.Name) {
			errs.Add(np+".name", "%q is not a network name", n.Name)
		}
		if j, dup := nets[n.Name]; dup {
			errs.Add(np+".name", "%q is also networks[%d]", n.Name, j)
		}
		nets[n.Name] = i
		if tooMany(errs, np+".aliases", len(n.Aliases), MaxAliases, "aliases") {
			continue
		}
		for j, a := range n.Aliases {
			if err := CheckName(a); err != nil {
				errs.Add(fmt.Sprintf("%s.aliases[%d]", np, j), "not a valid host name: %v", err)
			}
		}
		if n.IPv4.IsValid() && !n.IPv4.Is4() {
			errs.Add(np+".ipv4", "%s is not an IPv4 address", n.IPv4)
		}
		if n.IPv6.IsValid() && (!n.IPv6.Is6() || n.IPv6.Is4In6()) {
			errs.Add(np+".ipv6", "%s is not an IPv6 address", n.IPv6)
		}
	}
	if c.Restart.Name != "" {
		if _, err := ParseRestartPolicy(c.Restart.String()); err != nil {
			errs.Add(p+".restart", "%v", err)
		}
	}
	if c.StopSignal != "" && !signals[CanonicalSignal(c.StopSignal)] {
		errs.Add(p+".stop_signal", "%q is not a stop signal (e.g. SIGTERM, SIGINT, SIGQUIT)", c.StopSignal)
	}
	if c.StopTimeout < 0 || c.StopTimeout > time.Hour {
		errs.Add(p+".stop_timeout", "%s is out of range [0s, 1h]", c.StopTimeout)
	}
	if c.StopTimeout%time.Second != 0 {
		errs.Add(p+".stop_timeout", "%s is not a whole number of seconds, which is what podman takes", c.StopTimeout)
	}
	if h := c.Healthcheck; h != nil && len(h.Test) == 0 {
		errs.Add(p+".healthcheck.test", "is empty; give the command to run, e.g. [\"pg_isready\"]")
	}
	if r := c.Resources; r.MemoryBytes < 0 || r.MilliCPUs < 0 || r.PidsLimit < 0 {
		errs.Add(p+".resources", "limits may not be negative")
	}
	for _, caps := range []struct {
		key  string
		list []string
	}{{"cap_add", c.CapAdd}, {"cap_drop", c.CapDrop}} {
		if tooMany(errs, p+"."+caps.key, len(caps.list), MaxCaps, "capabilities") {
			continue
		}
		for i, cp := range caps.list {
			if !capRE.MatchString(cp) {
				errs.Add(fmt.Sprintf("%s.%s[%d]", p, caps.key, i), "%q is not a capability name (e.g. NET_ADMIN)", cp)
			}
		}
	}
}

// validateHostNetwork adds the faults of a container on the host's network
// (spec.HostNetwork) asking for what only a network of its own has: another
// network, aliases, static addresses or published ports. Podman would
// ignore some of them silently and refuse others at every pass; the
// container binds the host's ports itself.
func validateHostNetwork(errs *FaultList, p string, c Container, networks []NetworkAttachment, ports []Port) {
	host := -1
	for i, n := range networks {
		if n.Name == HostNetwork {
			host = i
			break
		}
	}
	if host < 0 {
		return
	}
	hp := fmt.Sprintf("%s.networks[%d]", p, host)
	for i, n := range networks {
		if n.Name != HostNetwork {
			errs.Add(fmt.Sprintf("%s.networks[%d].name", p, i), "%q with networks[%d] \"host\": a container on the host's network has no other network; declare it on the host's network only, or drop \"host\"", n.Name, host)
		}
	}
	n := networks[host]
	if len(n.Aliases) > 0 {
		errs.Add(hp+".aliases", "a container on the host's network has no network aliases (it answers on the host's own names); remove them")
	}
	if n.IPv4.IsValid() {
		errs.Add(hp+".ipv4", "a container on the host's network has the host's addresses, not a static one; remove it")
	}
	if n.IPv6.IsValid() {
		errs.Add(hp+".ipv6", "a container on the host's network has the host's addresses, not a static one; remove it")
	}
	for i := range ports {
		errs.Add(fmt.Sprintf("%s.ports[%d]", p, i), "a container on the host's network publishes no ports: it binds the host's ports itself; remove ports")
	}
}

// tooMany adds a fault when a list or map at path holds n entries, more
// than max, and reports whether it did.
func tooMany(errs *FaultList, path string, n, max int, what string) bool {
	if n <= max {
		return false
	}
	errs.Add(path, "%d %s; at most %d", n, what, max)
	return true
}

// hostClaims finds what no two containers of a machine can hold at once:
// a published host port (address, port and protocol) and a static address
// on a network. The runtime refuses the second at every start (the port
// is bound, the address allocated), so a declaration asking for both
// would fail every pass: it is refused when validated instead. One map
// of each over the whole declaration, in the order of its containers.
type hostClaims struct {
	ports map[hostPort]portClaim
	addrs map[staticAddr]int32 // the container asking it first
}

type hostPort struct {
	ip    netip.Addr // zero: all addresses
	port  uint16
	proto string
}

// portClaim is who publishes a host port first: containers[c].ports[p]
// (int32: MaxContainers and MaxPorts fit).
type portClaim struct{ c, p int32 }

type staticAddr struct {
	network string
	addr    netip.Addr
}

// check adds the claims of cs[i], reporting each another container made
// before it (or, for a host port, the same container in an earlier
// entry). Lists beyond their limits are not judged entry by entry, as
// validateContainer does not. The maps are made on first use, sized for
// one claim per container.
func (h *hostClaims) check(errs *FaultList, cs []Container, i int) {
	c := cs[i]
	if len(c.Ports) <= MaxPorts {
		for k, port := range c.Ports {
			if port.HostPort == 0 {
				continue
			}
			if h.ports == nil {
				h.ports = make(map[hostPort]portClaim, len(cs)-i)
			}
			key := hostPort{port.HostIP, port.HostPort, normProto(port.Protocol)}
			first, dup := h.ports[key]
			switch {
			case !dup:
				h.ports[key] = portClaim{int32(i), int32(k)}
			case int(first.c) == i:
				errs.Add(fmt.Sprintf("containers[%d].ports[%d].host_port", i, k), "%s is also published by ports[%d]", key, first.p)
			default:
				errs.Add(fmt.Sprintf("containers[%d].ports[%d]", i, k), "host port %s is already published by containers[%d] %q", key, first.c, cs[first.c].Name)
			}
		}
	}
	if len(c.Networks) <= MaxNetworks {
		for k, n := range c.Networks {
			for _, a := range []struct {
				field string
				addr  netip.Addr
			}{{"ipv4", n.IPv4}, {"ipv6", n.IPv6}} {
				if !a.addr.IsValid() {
					continue
				}
				if h.addrs == nil {
					h.addrs = make(map[staticAddr]int32, len(cs)-i)
				}
				key := staticAddr{n.Name, a.addr}
				if j, dup := h.addrs[key]; dup && int(j) != i {
					errs.Add(fmt.Sprintf("containers[%d].networks[%d].%s", i, k, a.field), "%s on network %q is already the static address of containers[%d] %q", a.addr, n.Name, j, cs[j].Name)
				} else if !dup {
					h.addrs[key] = int32(i)
				}
			}
		}
	}
}

// String is the port as an operator writes it: 8080/tcp, 127.0.0.1:8080/tcp.
func (p hostPort) String() string {
	if !p.ip.IsValid() {
		return fmt.Sprintf("%d/%s", p.port, p.proto)
	}
	return netip.AddrPortFrom(p.ip, p.port).String() + "/" + p.proto
}

func normProto(p string) string {
	if p == "" {
		return DefaultProtocol
	}
	return p
}
