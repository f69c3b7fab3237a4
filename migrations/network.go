package migrations

import (
	"net/netip"
	"slices"

	"github.com/meshhost/meshhost/spec"
)

// Network is one runtime network as the probe needs it. The runtime
// reports it (reconcile/podman's Networks).
type Network struct {
	Name   string
	Driver string // "bridge", "macvlan", "ipvlan", "host", "none", ...
	// Interface is the host side interface, e.g. "podman0"; it exists only
	// while a container is attached. Informational.
	Interface string
	// Subnets with their gateways (zero when the network has none).
	Subnets []Subnet
	// DNSEnabled: the runtime serves container names on the gateways
	// (podman's aardvark-dns), so port 53 there is not ours.
	DNSEnabled bool
	// Internal: no route out of the network, the host's other addresses
	// included.
	Internal bool
	// IPv6: the network has IPv6 enabled. Informational.
	IPv6 bool
}

// Subnet is one subnet of a Network.
type Subnet struct {
	Prefix  netip.Prefix
	Gateway netip.Addr // zero when the network has none
}

// Kind is what decides which strategies can work on a network.
type Kind string

const (
	// KindBridge is a routed bridge without runtime DNS: podman's default
	// network "podman" (and Docker's default bridge).
	KindBridge Kind = "bridge"
	// KindBridgeDNS is a routed bridge whose gateways aardvark-dns serves:
	// `podman network create` without --disable-dns.
	KindBridgeDNS Kind = "bridge-dns"
	// KindInternal is a bridge without a route out and without runtime DNS.
	KindInternal Kind = "internal"
	// KindInternalDNS is an internal bridge with aardvark-dns: its gateway
	// port 53 is aardvark's and nothing else of the host is reachable.
	KindInternalDNS Kind = "internal-dns"
	// KindMacvlan and KindIPvlan put containers on the parent interface's
	// link; the host itself is usually unreachable from them.
	KindMacvlan Kind = "macvlan"
	KindIPvlan  Kind = "ipvlan"
	// KindHost shares the host's network namespace.
	KindHost Kind = "host"
	// KindNone has no network: nothing to resolve.
	KindNone Kind = "none"
	// KindOther is any other driver; nothing is assumed of it.
	KindOther Kind = "other"
)

// KindOf classifies n.
func KindOf(n Network) Kind {
	switch n.Driver {
	case "bridge", "":
		switch {
		case n.Internal && n.DNSEnabled:
			return KindInternalDNS
		case n.Internal:
			return KindInternal
		case n.DNSEnabled:
			return KindBridgeDNS
		}
		return KindBridge
	case "macvlan":
		return KindMacvlan
	case "ipvlan":
		return KindIPvlan
	case "host":
		return KindHost
	case "none":
		return KindNone
	}
	return KindOther
}

// Strategy is how a container on a network reaches the resolver.
type Strategy string

const (
	// StrategyGateway: the resolver listens on the network's gateway port
	// 53 (bound ahead of the bridge with IP_FREEBIND) and is the
	// container's DNS server. Only where the runtime does not serve DNS.
	StrategyGateway Strategy = "gateway"
	// StrategyNodeLocal: the resolver listens on a node-local address
	// assigned to the host's lo (RunnerConfig.NodeLocal), given to the
	// container as its DNS server. On a network without runtime DNS the
	// container reaches it through its default route. On a DNS-enabled
	// network the container's search list keeps dns.podman, and then it
	// depends on the runtime: podman before 4.4 writes only the given
	// server into resolv.conf, so the container asks the resolver, which
	// forwards the network's container names (dns.podman and single
	// labels) from its subnets to its aardvark-dns; podman 4.4 and later
	// keep aardvark-dns as the container's nameserver and make it forward
	// what it does not serve to the given server, from the host (the
	// query's source is the node-local address itself, which the resolver
	// then answers).
	StrategyNodeLocal Strategy = "node-local"
	// StrategyAardvark: on a DNS-enabled network whose runtime keeps
	// aardvark-dns as the container's nameserver and makes it forward
	// what it does not serve to the container's --dns servers (podman 4.4
	// and later), the resolver listens on a loopback address
	// (RunnerConfig.Loopback, any of 127.0.0.0/8: nothing to assign),
	// which aardvark-dns reaches from the host. Container names stay
	// aardvark's; everything else reaches the resolver. Where the runtime
	// writes the given server into resolv.conf instead (podman before
	// 4.4), the container would ask its own loopback: the probe fails, and
	// says so.
	StrategyAardvark Strategy = "aardvark"
	// StrategyLoopback: on the host's network (spec.HostNetwork) the
	// container shares the host's namespace, so the resolver listens on a
	// loopback address (RunnerConfig.Loopback, as StrategyAardvark's:
	// nothing to assign, nothing reachable from off the machine), which is
	// the container's DNS server.
	StrategyLoopback Strategy = "loopback"
	// StrategyNone: the network has nothing to resolve (driver none).
	StrategyNone Strategy = "none"
)

// HostNetwork is the host's network namespace as a Network. Podman lists
// no such network (its `--network host` is a mode); WithHost adds it where
// a declared container uses it, so that it is probed, switched and rolled
// back as any other network.
var HostNetwork = Network{Name: spec.HostNetwork, Driver: "host"}

// WithHost returns nets, the runtime's networks, with HostNetwork added
// when used (Gate.Declare's networks, State.Used) names spec.HostNetwork
// and nets has no network of that name. A machine whose declaration puts
// nothing on the host's network never probes it.
func WithHost(nets []Network, used []string) []Network {
	if !slices.Contains(used, spec.HostNetwork) || slices.ContainsFunc(nets, func(n Network) bool { return n.Name == spec.HostNetwork }) {
		return nets
	}
	return append(slices.Clone(nets), HostNetwork)
}

// PodmanDNSZone is the search domain of podman's aardvark-dns.
const PodmanDNSZone = "dns.podman"

// candidates lists the strategies worth probing on a network of kind k, in
// order of preference. Empty: none can work, and the network is reported.
// On a DNS-enabled bridge the aardvark strategy comes first: where it
// works it needs no address assigned to lo.
func candidates(k Kind) []Strategy {
	switch k {
	case KindBridge:
		return []Strategy{StrategyGateway, StrategyNodeLocal}
	case KindBridgeDNS:
		return []Strategy{StrategyAardvark, StrategyNodeLocal}
	case KindHost:
		return []Strategy{StrategyLoopback, StrategyNodeLocal}
	case KindInternal:
		return []Strategy{StrategyGateway}
	case KindMacvlan, KindIPvlan, KindOther:
		return []Strategy{StrategyNodeLocal} // probed only when allowed, see RunnerConfig
	case KindNone:
		return []Strategy{StrategyNone}
	}
	return nil // KindInternalDNS
}

// gateways returns the gateways a container on the network is given as its
// DNS servers, in subnet order: the IPv4 ones, or on an IPv6-only network
// the IPv6 ones. One family only: every nameserver line is the resolver,
// and a container with addresses of both families reaches IPv4.
func (n Network) gateways() []netip.Addr {
	var v4, v6 []netip.Addr
	for _, s := range n.Subnets {
		switch gw := s.Gateway; {
		case !gw.IsValid():
		case gw.Is4() && !slices.Contains(v4, gw):
			v4 = append(v4, gw)
		case gw.Is6() && !slices.Contains(v6, gw):
			v6 = append(v6, gw)
		}
	}
	if len(v4) > 0 {
		return v4
	}
	return v6
}

// hasFamily reports whether the network has a subnet of a's family, so
// that a container on it has an address to reach a from.
func (n Network) hasFamily(a netip.Addr) bool {
	for _, s := range n.Subnets {
		if s.Prefix.IsValid() && s.Prefix.Addr().Is4() == a.Is4() {
			return true
		}
	}
	return false
}

func (n Network) prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range n.Subnets {
		if s.Prefix.IsValid() {
			out = append(out, s.Prefix.Masked())
		}
	}
	return out
}
