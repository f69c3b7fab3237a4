package resolver

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// localRoute sends one client network's questions for a zone, and for
// single-label names, to that network's own DNS server.
type localRoute struct {
	client netip.Prefix
	zone   string // canonical
	server netip.AddrPort
}

// SetLocalForward sends the questions of clients in client for names under
// zone (e.g. "dns.podman") and for single-label names to server, typically
// the aardvark-dns of that podman network on its gateway port 53, instead of
// the upstreams. A container whose only nameserver is this resolver then
// still resolves its peers' container names. A zero server removes the route.
func (s *Server) SetLocalForward(client netip.Prefix, zone string, server netip.AddrPort) {
	s.localMu.Lock()
	defer s.localMu.Unlock()
	client = client.Masked()
	zone = spec.CanonicalName(zone)
	routes := slices.Clone(*s.local.Load())
	routes = slices.DeleteFunc(routes, func(r localRoute) bool { return r.client == client && r.zone == zone })
	if server.IsValid() {
		routes = append(routes, localRoute{client: client, zone: zone, server: server})
		// Most specific client network first.
		slices.SortStableFunc(routes, func(a, b localRoute) int { return b.client.Bits() - a.client.Bits() })
	}
	s.local.Store(&routes)
}

// localForward returns the network-local server for a client's question,
// nil when the upstreams take it.
func (s *Server) localForward(client netip.Addr, name string) []netip.AddrPort {
	routes := *s.local.Load()
	if len(routes) == 0 || name == "" {
		return nil
	}
	client = client.Unmap()
	single := !strings.Contains(name, ".")
	for _, r := range routes {
		if r.client.Contains(client) && (single || spec.InZone(name, r.zone)) {
			return []netip.AddrPort{r.server}
		}
	}
	return nil
}
