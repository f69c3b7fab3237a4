package memory

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/spec"
)

// claim is what one running container holds on the machine, as podman
// does: a published host port (bound at start), or a static address on a
// network (allocated at start). A second container asking for it fails to
// start, whatever its create call said.
type claim struct {
	network string     // a static address's network; "" for a host port
	ip      netip.Addr // the host address (zero: all) or the static address
	port    uint16
	proto   string
}

func claimsOf(r spec.Rendered) []claim {
	var out []claim
	for _, p := range r.Ports {
		if p.HostPort != 0 {
			out = append(out, claim{ip: p.HostIP, port: p.HostPort, proto: cmp.Or(p.Protocol, spec.DefaultProtocol)})
		}
	}
	for _, n := range r.Networks {
		for _, a := range []netip.Addr{n.IPv4, n.IPv6} {
			if a.IsValid() {
				out = append(out, claim{network: n.Name, ip: a})
			}
		}
	}
	return out
}

// holdLocked takes what c holds once running, or fails, taking nothing,
// when another container holds any of it. mu must be held.
func (m *Runtime) holdLocked(c *container) error {
	syncs.AssertLocked(&m.mu)
	claims := claimsOf(c.settings)
	for _, cl := range claims {
		holder, ok := m.held[cl]
		if !ok || holder == c.id {
			continue
		}
		if cl.network != "" {
			return fmt.Errorf("IPAM error: requested ip address %s is already allocated to container ID %s", cl.ip, holder)
		}
		ip := cl.ip
		if !ip.IsValid() {
			ip = netip.IPv4Unspecified()
		}
		return fmt.Errorf("cannot listen on the %s port: listen %s %s: bind: address already in use (held by container ID %s)",
			strings.ToUpper(cl.proto), cl.proto, netip.AddrPortFrom(ip, cl.port), holder)
	}
	for _, cl := range claims {
		m.held[cl] = c.id
	}
	return nil
}

// releaseLocked gives up what c holds (it stopped). mu must be held.
func (m *Runtime) releaseLocked(c *container) {
	syncs.AssertLocked(&m.mu)
	for _, cl := range claimsOf(c.settings) {
		if m.held[cl] == c.id {
			delete(m.held, cl)
		}
	}
}
