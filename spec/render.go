package spec

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// NameMode is how a container finds mesh names.
type NameMode string

const (
	// Copy puts the whole roster into the container's hosts entries at
	// creation (the old reconciler's withMeshNames). A roster change then
	// changes the container's create-time settings and replaces it.
	Copy NameMode = "copy"
	// Resolve copies nothing: the container's DNS server is the resolver on
	// its machine, which answers from the current roster at lookup time.
	Resolve NameMode = "resolve"
)

// Mode is a NameMode with what it needs on one network.
type Mode struct {
	Names NameMode
	// DNS is the container's resolver configuration in Resolve mode; it must
	// name at least one server. Copy mode ignores it.
	DNS DNSConfig
}

// DNSConfig is what a container's /etc/resolv.conf says.
type DNSConfig struct {
	Servers []netip.Addr
	Search  []string
	Options []string // e.g. "ndots:1", "timeout:2"
}

// HostEntry is one line of a container's /etc/hosts.
type HostEntry struct {
	Name string
	Addr netip.Addr
}

// Rendered is the exact create-time configuration the runtime receives for
// one container: the declared Container with defaults applied and orders
// fixed, plus what the name mode adds. Render builds it; nothing else should.
type Rendered struct {
	Container
	Mode  NameMode
	Hosts []HostEntry // Copy mode: the roster, sorted by name then address
	DNS   DNSConfig   // Resolve mode: the resolver
}

// Default healthcheck timings, podman's own, applied when a healthcheck leaves
// them unset.
const (
	DefaultHealthInterval = 30 * time.Second
	DefaultHealthTimeout  = 30 * time.Second
	DefaultHealthRetries  = 3
)

// Render returns the create-time configuration of c in mode m. In Copy mode
// the roster becomes c's hosts entries; in Resolve mode the roster is not
// read at all and may be nil. The result is deterministic: the same inputs
// give the same value whatever the order of maps, and equal Rendered values
// encode to the same bytes.
func Render(c Container, r *Roster, m Mode) (Rendered, error) {
	out := Rendered{Container: normalize(c), Mode: m.Names}
	switch m.Names {
	case Copy:
		if r == nil {
			return Rendered{}, errors.New("render: copy mode needs a roster")
		}
		out.Hosts = hostEntries(r)
	case Resolve:
		if len(m.DNS.Servers) == 0 {
			return Rendered{}, errors.New("render: resolve mode needs the resolver's address as a DNS server")
		}
		for _, s := range m.DNS.Servers {
			if !s.IsValid() {
				return Rendered{}, errors.New("render: resolve mode has an invalid DNS server address")
			}
		}
		out.DNS = DNSConfig{
			Servers: slices.Clone(m.DNS.Servers), // order matters to resolvers
			Search:  slices.Clone(m.DNS.Search),  // order is the search order
			Options: slices.Clone(m.DNS.Options),
		}
	default:
		return Rendered{}, fmt.Errorf("render: unknown name mode %q; want %q or %q", m.Names, Copy, Resolve)
	}
	return out, nil
}

func hostEntries(r *Roster) []HostEntry {
	var hosts []HostEntry
	for name, addrs := range r.Names {
		for _, a := range addrs {
			hosts = append(hosts, HostEntry{Name: CanonicalName(name), Addr: a})
		}
	}
	slices.SortFunc(hosts, func(a, b HostEntry) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), a.Addr.Compare(b.Addr))
	})
	return slices.Compact(hosts)
}

// normalize applies defaults and fixes the order of everything whose order
// carries no meaning, so equal intent gives equal values.
func normalize(c Container) Container {
	n := c
	n.Command = nilIfEmpty(c.Command)
	n.Entrypoint = nilIfEmpty(c.Entrypoint)
	n.Env = mapOrNil(c.Env)
	n.Labels = mapOrNil(c.Labels)
	n.StopSignal = CanonicalSignal(c.StopSignal)
	if n.StopTimeout == 0 {
		n.StopTimeout = DefaultStopTimeout
	}
	if n.Restart.Name == "" {
		n.Restart.Name = "no"
	}
	n.Ports = slices.Clone(c.Ports)
	for i := range n.Ports {
		if n.Ports[i].Protocol == "" {
			n.Ports[i].Protocol = DefaultProtocol
		}
	}
	slices.SortFunc(n.Ports, func(a, b Port) int {
		return cmp.Or(cmp.Compare(a.ContainerPort, b.ContainerPort), cmp.Compare(a.Protocol, b.Protocol),
			a.HostIP.Compare(b.HostIP), cmp.Compare(a.HostPort, b.HostPort))
	})
	n.Mounts = slices.Clone(c.Mounts)
	// Sorting by target also mounts a parent before what is mounted inside it.
	slices.SortFunc(n.Mounts, func(a, b Mount) int { return cmp.Compare(a.Target, b.Target) })
	n.Networks = nil
	for _, na := range c.Networks {
		na.Aliases = canonicalList(na.Aliases)
		n.Networks = append(n.Networks, na)
	}
	if len(n.Networks) == 0 {
		n.Networks = []NetworkAttachment{{Name: DefaultNetwork}}
	}
	slices.SortFunc(n.Networks, func(a, b NetworkAttachment) int { return cmp.Compare(a.Name, b.Name) })
	if c.Healthcheck != nil {
		h := *c.Healthcheck
		h.Test = slices.Clone(h.Test)
		h.Interval = cmp.Or(h.Interval, DefaultHealthInterval)
		h.Timeout = cmp.Or(h.Timeout, DefaultHealthTimeout)
		h.Retries = cmp.Or(h.Retries, DefaultHealthRetries)
		n.Healthcheck = &h
	}
	n.CapAdd = canonicalCaps(c.CapAdd)
	n.CapDrop = canonicalCaps(c.CapDrop)
	n.DependsOn = canonicalList(c.DependsOn)
	return n
}

// CanonicalSignal spells a stop signal as podman reports it: "int", "INT"
// and "SIGINT" are all "SIGINT"; empty is DefaultStopSignal.
func CanonicalSignal(s string) string {
	if s == "" {
		return DefaultStopSignal
	}
	s = strings.ToUpper(s)
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	return s
}

func canonicalCaps(caps []string) []string {
	if len(caps) == 0 {
		return nil
	}
	out := make([]string, len(caps))
	for i, c := range caps {
		c = strings.ToUpper(c)
		if !strings.HasPrefix(c, "CAP_") && c != "ALL" {
			c = "CAP_" + c
		}
		out[i] = c
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// canonicalList sorts and dedups a list whose order means nothing.
func canonicalList(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

func mapOrNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// HostsLines returns the lines Copy mode adds to /etc/hosts, in order, as
// the runtime writes them ("ADDR\tNAME").
func (r Rendered) HostsLines() []string {
	lines := make([]string, len(r.Hosts))
	for i, h := range r.Hosts {
		lines[i] = h.Addr.String() + "\t" + h.Name
	}
	return lines
}

// ResolvConf returns the /etc/resolv.conf a Resolve mode container gets, or
// "" in Copy mode, where the runtime's own configuration applies.
func (r Rendered) ResolvConf() string {
	if r.Mode != Resolve {
		return ""
	}
	var b strings.Builder
	if len(r.DNS.Search) > 0 {
		b.WriteString("search " + strings.Join(r.DNS.Search, " ") + "\n")
	}
	for _, s := range r.DNS.Servers {
		b.WriteString("nameserver " + s.String() + "\n")
	}
	if len(r.DNS.Options) > 0 {
		b.WriteString("options " + strings.Join(r.DNS.Options, " ") + "\n")
	}
	return b.String()
}
