package control

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// Exposure is how the resolver is reachable from the machine's container
// networks, as the migration gate decides it.
type Exposure struct {
	// Listen are the addresses served over UDP and TCP, such as a bridge's
	// gateway (bound before the bridge exists, with IP_FREEBIND) or the
	// node-local address.
	Listen []netip.AddrPort `json:"listen"`
	// Allow are the client networks answered besides loopback.
	Allow []netip.Prefix `json:"allow"`
	// Forwards send a client network's questions under a zone (and its
	// single-label ones) to that network's own DNS server.
	Forwards []Forward `json:"forwards"`
	// Networks are the runtime's networks by name with their subnets, so
	// that the resolver counts and logs refused clients by the network
	// they come from (resolver.Server.SetNetworks). A client older than
	// them sends none: refused clients are then counted as "unknown".
	Networks []Network `json:"networks,omitempty"`
}

// Network is one runtime network a client may come from.
type Network struct {
	Name     string         `json:"name"`
	Prefixes []netip.Prefix `json:"prefixes"`
}

// Forward is one local forward (resolver.Server.SetLocalForward).
type Forward struct {
	Client netip.Prefix   `json:"client"`
	Zone   string         `json:"zone"`
	Server netip.AddrPort `json:"server"`
}

type forwardKey struct {
	client netip.Prefix
	zone   string
}

func (f Forward) key() forwardKey { return forwardKey{f.Client, f.Zone} }

// Normalize returns x with addresses unmapped, prefixes masked, zones
// canonical, invalid entries dropped, and every list sorted and without
// duplicates (a later forward for the same client and zone wins), so that
// two exposures meaning the same compare equal.
func (x Exposure) Normalize() Exposure {
	var out Exposure
	for _, a := range x.Listen {
		if a.IsValid() {
			out.Listen = append(out.Listen, netip.AddrPortFrom(a.Addr().Unmap(), a.Port()))
		}
	}
	slices.SortFunc(out.Listen, netip.AddrPort.Compare)
	out.Listen = slices.Compact(out.Listen)
	for _, p := range x.Allow {
		if p.IsValid() {
			out.Allow = append(out.Allow, p.Masked())
		}
	}
	slices.SortFunc(out.Allow, comparePrefix)
	out.Allow = slices.Compact(out.Allow)
	byKey := map[forwardKey]Forward{}
	for _, f := range x.Forwards {
		if !f.Client.IsValid() || !f.Server.IsValid() {
			continue
		}
		f.Client = f.Client.Masked()
		f.Zone = spec.CanonicalName(f.Zone)
		byKey[f.key()] = f
	}
	for _, f := range byKey {
		out.Forwards = append(out.Forwards, f)
	}
	slices.SortFunc(out.Forwards, func(a, b Forward) int {
		return cmp.Or(comparePrefix(a.Client, b.Client), strings.Compare(a.Zone, b.Zone))
	})
	for _, n := range x.Networks {
		if n.Name == "" {
			continue
		}
		nn := Network{Name: n.Name}
		for _, p := range n.Prefixes {
			if p.IsValid() {
				nn.Prefixes = append(nn.Prefixes, p.Masked())
			}
		}
		slices.SortFunc(nn.Prefixes, comparePrefix)
		nn.Prefixes = slices.Compact(nn.Prefixes)
		out.Networks = append(out.Networks, nn)
	}
	slices.SortStableFunc(out.Networks, func(a, b Network) int { return strings.Compare(a.Name, b.Name) })
	out.Networks = slices.CompactFunc(out.Networks, func(a, b Network) bool { return a.Name == b.Name })
	if out.Listen == nil {
		out.Listen = []netip.AddrPort{}
	}
	if out.Allow == nil {
		out.Allow = []netip.Prefix{}
	}
	if out.Forwards == nil {
		out.Forwards = []Forward{}
	}
	return out
}

// Equal reports whether x and y mean the same exposure.
func (x Exposure) Equal(y Exposure) bool {
	x, y = x.Normalize(), y.Normalize()
	return slices.Equal(x.Listen, y.Listen) && slices.Equal(x.Allow, y.Allow) && slices.Equal(x.Forwards, y.Forwards) &&
		slices.EqualFunc(x.Networks, y.Networks, func(a, b Network) bool { return a.Name == b.Name && slices.Equal(a.Prefixes, b.Prefixes) })
}

// resolverNetworks is ns as the resolver takes them.
func resolverNetworks(ns []Network) []resolver.Network {
	out := make([]resolver.Network, 0, len(ns))
	for _, n := range ns {
		out = append(out, resolver.Network{Name: n.Name, Prefixes: slices.Clone(n.Prefixes)})
	}
	return out
}

// union returns the exposure serving what x and y serve; y's forwards win
// over x's for the same client network and zone.
func union(x, y Exposure) Exposure {
	if len(y.Networks) == 0 {
		y.Networks = x.Networks
	}
	return Exposure{
		Listen:   append(slices.Clone(x.Listen), y.Listen...),
		Allow:    append(slices.Clone(x.Allow), y.Allow...),
		Forwards: append(slices.Clone(x.Forwards), y.Forwards...),
		// The networks' names are a fact of the runtime, not something
		// served: the latest told replace the ones inherited.
		Networks: y.Networks,
	}.Normalize()
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// Status is GET /v1/status.
type Status struct {
	Version    string           `json:"version"`
	PID        int              `json:"pid"`
	Generation uint64           `json:"generation"` // of the roster served; 0: none yet
	Listeners  []netip.AddrPort `json:"listeners"`  // every address served, the resolver's own included
	Exposure   Exposure         `json:"exposure"`   // the exposure in force
	// Failed says, by address, why an exposed address is not served; the
	// resolver retries them.
	Failed map[string]string `json:"failed,omitempty"`
}

// ExposureResult is the reply to PUT /v1/exposure.
type ExposureResult struct {
	Listeners []netip.AddrPort  `json:"listeners"`
	Failed    map[string]string `json:"failed,omitempty"`
}

// RosterResult is the reply to PUT and PATCH /v1/roster, and the body of
// their errors.
type RosterResult struct {
	// Generation is the generation served after the request.
	Generation uint64 `json:"generation"`
	Error      string `json:"error,omitempty"`
	// Conflict says why a 409 refused the roster or delta: ConflictNotNewer
	// or ConflictDeltaBase. A resolver older than deltas leaves it empty,
	// and means ConflictNotNewer.
	Conflict string `json:"conflict,omitempty"`
	// Reason is the admission reason of a refusal (package admit's, as the
	// agent counts its refusals): roster_older, roster_generation_reused,
	// delta_base, invalid. Empty when accepted.
	Reason string `json:"reason,omitempty"`
}

// The reasons of a 409 (RosterResult.Conflict).
const (
	// ConflictNotNewer: the generation put is served already with other
	// names, or an older one (resolver.ErrStaleGeneration; Reason says
	// which). The same roster or delta again is 200.
	ConflictNotNewer = "not_newer"
	// ConflictDeltaBase: the delta is from another generation than the one
	// served (spec.ErrDeltaBase).
	ConflictDeltaBase = "delta_base"
)

// Canary is GET /v1/canary.
type Canary struct {
	Name    string     `json:"name,omitempty"`
	Address netip.Addr `json:"address"`
}
