package migrations

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/spec"
)

// ExposerConfig is what an Exposer needs. Resolver is required.
type ExposerConfig struct {
	Resolver Resolver
	// NodeLocal is StrategyNodeLocal's address. Default DefaultNodeLocal.
	// The strategy is used only while the address is assigned to this
	// host, so probe traffic never leaves the machine.
	NodeLocal netip.Addr
	// Loopback is StrategyAardvark's address, where aardvark-dns forwards
	// from the host, and StrategyLoopback's, where a container on the
	// host's network asks. Default DefaultLoopback; it must be in 127.0.0.0/8
	// (or ::1), which every host routes to itself without configuration.
	Loopback netip.Addr
	// Allow is the resolver's own client allow list; the Exposer sets the
	// resolver's list to it plus the subnets of the networks it serves.
	// Once an Exposer exists, change the list through SetAllow only.
	Allow []netip.Prefix
	// Static lists the addresses the resolver serves by the operator's
	// configuration (the agent's --listen). The Exposer neither listens on
	// them again nor ever stops serving them.
	Static []netip.AddrPort
	Logger *slog.Logger
}

// Exposer makes the resolver reachable from the runtime's networks, the
// way each network's strategy says: it listens where the strategy says,
// keeps the network's local forwards and allows its subnets; and it takes
// that back from networks that are gone (Retain).
//
// It is separate from the Runner, which needs the probe image and
// configuration, so that the agent can expose the resolver on networks
// already in resolve mode even when no Runner can be made: their
// containers must reach it whether or not more networks can be probed. The
// agent's Runner shares the agent's Exposer (RunnerConfig.Exposer), so both
// see the same listeners and allow list. Methods are safe for concurrent
// use.
type Exposer struct {
	cfg ExposerConfig
	log *slog.Logger

	// mu guards the fields below, the resolver's exposure.
	mu        sync.Mutex
	listening map[netip.AddrPort]bool // addresses the Exposer made the resolver listen on
	networks  map[string]*exposure    // by network name
}

// exposure is what one network was given, through every strategy exposed
// on it (a probe may try several).
type exposure struct {
	subnets  []string         // subnetsOf the network when exposed
	allow    []netip.Prefix   // its subnets, allowed
	listen   []netip.AddrPort // the addresses its strategies listen on
	forwards []netip.Prefix   // client networks of its local forwards
}

// NewExposer returns an Exposer for cfg.
func NewExposer(cfg ExposerConfig) (*Exposer, error) {
	if cfg.Resolver == nil {
		return nil, errors.New("migrations: ExposerConfig.Resolver is required")
	}
	if !cfg.NodeLocal.IsValid() {
		cfg.NodeLocal = netip.MustParseAddr(DefaultNodeLocal)
	}
	if !cfg.Loopback.IsValid() {
		cfg.Loopback = netip.MustParseAddr(DefaultLoopback)
	}
	if cfg.Loopback = cfg.Loopback.Unmap(); !cfg.Loopback.IsLoopback() {
		return nil, fmt.Errorf("migrations: ExposerConfig.Loopback %s is not a loopback address (127.0.0.0/8 or ::1)", cfg.Loopback)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Allow, cfg.Static = slices.Clone(cfg.Allow), slices.Clone(cfg.Static)
	return &Exposer{
		cfg: cfg, log: cfg.Logger.With("component", "migrations"),
		listening: map[netip.AddrPort]bool{}, networks: map[string]*exposure{},
	}, nil
}

// endpoint is what strategy s needs on network n: where the resolver
// listens, which local forwards it keeps, which clients it answers besides
// the network's subnets, and the container's DNS configuration.
type endpoint struct {
	listen   []netip.AddrPort
	forwards []localForward
	allow    []netip.Prefix
	dns      spec.DNSConfig
}

type localForward struct {
	client netip.Prefix
	server netip.AddrPort
}

// dnsOptions are the resolv.conf options of every resolve-mode container.
var dnsOptions = []string{"ndots:1"}

func (e *Exposer) endpoint(n Network, s Strategy) (endpoint, error) {
	switch s {
	case StrategyGateway:
		if n.DNSEnabled {
			return endpoint{}, errors.New("aardvark-dns serves the gateway's port 53")
		}
		gws := n.gateways()
		if len(gws) == 0 {
			if n.Internal {
				return endpoint{}, errors.New("the internal network has no gateway, so nothing on this host is reachable from it (podman gives an internal network without DNS a gateway only when created with --gateway)")
			}
			return endpoint{}, errors.New("the network has no gateway")
		}
		ep := endpoint{dns: spec.DNSConfig{Servers: gws, Options: dnsOptions}}
		for _, gw := range gws {
			ep.listen = append(ep.listen, netip.AddrPortFrom(gw, 53))
		}
		return ep, nil
	case StrategyNodeLocal:
		nl := e.cfg.NodeLocal
		if !assigned(nl) {
			return endpoint{}, fmt.Errorf("node-local address %s is not assigned to this host; add it (ip addr add %s/%d dev lo) or configure another", nl, nl, nl.BitLen())
		}
		if !n.DNSEnabled && !n.hasFamily(nl) {
			// The container itself asks the node-local address. (Through
			// aardvark-dns, on a DNS-enabled network, the host asks it.)
			return endpoint{}, fmt.Errorf("the network has no %s subnet, so its containers have no route to the node-local address %s; configure a node-local address of the network's family", family(nl), nl)
		}
		// The node-local address as a client: where aardvark-dns forwards
		// to it (podman 4.4 and later), the host sends from that address.
		// A packet from one of the host's own addresses comes from the host.
		ep := endpoint{
			listen: []netip.AddrPort{netip.AddrPortFrom(nl, 53)},
			allow:  []netip.Prefix{netip.PrefixFrom(nl, nl.BitLen())},
			dns:    spec.DNSConfig{Servers: []netip.Addr{nl}, Options: dnsOptions},
		}
		if n.DNSEnabled {
			ep.dns.Search = []string{PodmanDNSZone}
			for _, sn := range n.Subnets {
				if sn.Prefix.IsValid() && sn.Gateway.IsValid() {
					ep.forwards = append(ep.forwards, localForward{sn.Prefix.Masked(), netip.AddrPortFrom(sn.Gateway, 53)})
				}
			}
		}
		return ep, nil
	case StrategyAardvark:
		if !n.DNSEnabled {
			return endpoint{}, errors.New("the network has no aardvark-dns to forward to the resolver")
		}
		lo := e.cfg.Loopback
		// Queries come from aardvark-dns on the host, from loopback: the
		// resolver answers loopback always, and needs no local forwards
		// (aardvark-dns answers container names itself).
		return endpoint{
			listen: []netip.AddrPort{netip.AddrPortFrom(lo, 53)},
			dns:    spec.DNSConfig{Servers: []netip.Addr{lo}, Search: []string{PodmanDNSZone}, Options: dnsOptions},
		}, nil
	case StrategyLoopback:
		if KindOf(n) != KindHost {
			return endpoint{}, errors.New("only a container on the host's network shares the host's loopback")
		}
		lo := e.cfg.Loopback
		// The container's queries come from the host's own namespace, from
		// loopback, which the resolver always answers.
		return endpoint{
			listen: []netip.AddrPort{netip.AddrPortFrom(lo, 53)},
			dns:    spec.DNSConfig{Servers: []netip.Addr{lo}, Options: dnsOptions},
		}, nil
	}
	return endpoint{}, fmt.Errorf("strategy %q needs no resolver", s)
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// assigned reports whether a is an address of one of this host's
// interfaces.
func assigned(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil && p.Addr().Unmap() == a {
			return true
		}
	}
	return false
}

// Expose makes the resolver reachable from network n through strategy s:
// it listens where s says (if not already), keeps n's local forwards and
// allows n's subnets. It is idempotent: the agent calls it on every pass
// for every network whose containers are in resolve mode
// (Gate.Strategies).
func (e *Exposer) Expose(n Network, s Strategy) (spec.DNSConfig, error) {
	if s == StrategyNone {
		return spec.DNSConfig{}, nil
	}
	ep, err := e.endpoint(n, s)
	if err != nil {
		return spec.DNSConfig{}, err
	}
	return ep.dns, e.expose(n, ep)
}

func (e *Exposer) expose(n Network, ep endpoint) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.networks[n.Name]
	if subnets := subnetsOf(n); x == nil || !slices.Equal(x.subnets, subnets) {
		if x != nil {
			// Recreated under the same name with other addresses (before
			// Retain saw it): what the old one needed goes.
			delete(e.networks, n.Name)
			e.dropLocked(map[string]*exposure{n.Name: x}, ep.listen, "network recreated with other subnets")
		}
		x = &exposure{subnets: subnets, allow: n.prefixes()}
		e.networks[n.Name] = x
	}
	for _, p := range ep.allow {
		if !slices.Contains(x.allow, p) {
			x.allow = append(x.allow, p)
		}
	}
	e.setAllowLocked()
	for _, f := range ep.forwards {
		e.cfg.Resolver.SetLocalForward(f.client, PodmanDNSZone, f.server)
		if !slices.Contains(x.forwards, f.client) {
			x.forwards = append(x.forwards, f.client)
		}
	}
	for _, a := range ep.listen {
		if !slices.Contains(x.listen, a) {
			x.listen = append(x.listen, a)
		}
		if e.listening[a] || slices.Contains(e.cfg.Static, a) {
			continue
		}
		if err := e.cfg.Resolver.Listen(a); err != nil {
			return fmt.Errorf("making the resolver listen on %s: %w", a, err)
		}
		e.listening[a] = true
	}
	return nil
}

// SetAllow replaces the resolver's own allow list (ExposerConfig.Allow);
// the subnets of exposed networks stay allowed.
func (e *Exposer) SetAllow(allow []netip.Prefix) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg.Allow = slices.Clone(allow)
	e.setAllowLocked()
}

// setAllowLocked gives the resolver the allow list: the Exposer's own plus
// every exposed network's subnets. mu must be held.
func (e *Exposer) setAllowLocked() {
	syncs.AssertLocked(&e.mu)
	allow := slices.Clone(e.cfg.Allow)
	for _, x := range e.networks {
		for _, p := range x.allow {
			if !slices.Contains(allow, p) { // the node-local address, allowed by every network using it
				allow = append(allow, p)
			}
		}
	}
	e.cfg.Resolver.SetAllow(allow)
}

// Retain takes the resolver's exposure back from the networks that no
// longer exist: nets is every network the runtime has now (the agent
// passes the list it makes each pass). A network gone from it, or there
// under the same name with other subnets (recreated), loses its allowed
// subnets and its local forwards, and the resolver stops listening on
// every address of it that no remaining network was exposed on: the
// node-local address stays while any network uses it, and the Static
// addresses always. Each removal is logged with the network and the
// address.
//
// A listener left behind holds a gateway address for nothing (and its port
// from whatever the address is given to next), and an allow entry left
// behind answers clients of a subnet podman may hand to anything.
func (e *Exposer) Retain(nets []Network) {
	present := make(map[string][]string, len(nets))
	for _, n := range nets {
		present[n.Name] = subnetsOf(n)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	gone := map[string]*exposure{}
	for name, x := range e.networks {
		if subnets, ok := present[name]; !ok || !slices.Equal(subnets, x.subnets) {
			gone[name] = x
			delete(e.networks, name)
		}
	}
	e.dropLocked(gone, nil, "network gone")
}

// dropLocked takes back what the networks gone (forgotten already) were
// given and no remaining network needs, nor keep; why starts each log
// line. mu must be held.
func (e *Exposer) dropLocked(gone map[string]*exposure, keep []netip.AddrPort, why string) {
	syncs.AssertLocked(&e.mu)
	if len(gone) == 0 {
		return
	}
	need := map[netip.AddrPort]bool{}
	for _, a := range keep {
		need[a] = true
	}
	allowed := map[netip.Prefix]bool{}
	forwarded := map[netip.Prefix]bool{}
	for _, x := range e.networks {
		for _, a := range x.listen {
			need[a] = true
		}
		for _, p := range x.allow {
			allowed[p] = true
		}
		for _, p := range x.forwards {
			forwarded[p] = true
		}
	}
	e.setAllowLocked()
	for _, name := range slices.Sorted(maps.Keys(gone)) {
		x := gone[name]
		for _, p := range x.allow {
			if !allowed[p] {
				e.log.Info(why+": its subnet may no longer query the resolver", "network", name, "subnet", p)
			}
		}
		for _, p := range x.forwards {
			if !forwarded[p] {
				e.cfg.Resolver.SetLocalForward(p, PodmanDNSZone, netip.AddrPort{}) // a zero server removes the route
				e.log.Info(why+": the resolver no longer forwards its subnet's container names", "network", name, "subnet", p)
			}
		}
		for _, a := range x.listen {
			if !e.listening[a] || need[a] || slices.Contains(e.cfg.Static, a) {
				continue
			}
			delete(e.listening, a)
			if err := e.cfg.Resolver.Unlisten(a); err != nil {
				e.log.Warn(why+": stopping the resolver's listener on its address", "network", name, "addr", a, "err", err)
				continue
			}
			e.log.Info(why+": the resolver stops listening on its address", "network", name, "addr", a)
		}
	}
}
