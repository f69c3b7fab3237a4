package resolver

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Network names client addresses for the count and log of refused queries
// (SetNetworks): the runtime's networks, by name, with their subnets.
type Network struct {
	Name     string
	Prefixes []netip.Prefix
}

// UnknownNetwork names refused clients in none of the networks SetNetworks
// named.
const UnknownNetwork = "unknown"

// refusedLogEvery bounds the log of refused clients: one line per network
// per interval, saying how many were refused since the last.
const refusedLogEvery = time.Minute

// refusal counts and logs the refused queries of one network.
type refusal struct {
	name     string
	count    atomic.Uint64 // refused queries, ever
	unlogged atomic.Uint64 // refused since the last log line
	nextLog  atomic.Int64  // unix nanoseconds before which nothing is logged
}

// refusedNets is what SetNetworks published: the networks to look a client
// up in, in order.
type refusedNets struct {
	nets []refusedNet
}

type refusedNet struct {
	prefixes []netip.Prefix
	r        *refusal
}

// refusals holds the counters of every network ever named: a counter
// never goes away (nor back to 0) when its network does.
type refusals struct {
	// mu guards byName; the hot path reads nets only.
	mu      sync.Mutex
	byName  map[string]*refusal
	nets    atomic.Pointer[refusedNets]
	unknown *refusal // byName[UnknownNetwork]
	desc    *prometheus.Desc
}

func newRefusals() *refusals {
	r := &refusals{byName: map[string]*refusal{}, desc: prometheus.NewDesc("meshhost_resolver_refused_total",
		"Queries refused because the client is outside the allowed networks (loopback, --allow, networks proven by the probe), by the runtime network holding the client (unknown: none).", []string{"network"}, nil)}
	r.unknown = &refusal{name: UnknownNetwork}
	r.byName[UnknownNetwork] = r.unknown
	r.nets.Store(&refusedNets{})
	return r
}

// SetNetworks names the networks clients come from. A refused query is
// counted (meshhost_resolver_refused_total{network}) and logged, at most
// once a minute per network with the count since, under the network
// holding its client, "unknown" when none does. Every network named has its
// counter from then on, at 0 until a query is refused.
func (s *Server) SetNetworks(nets []Network) {
	r := s.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	pub := &refusedNets{}
	for _, n := range nets {
		c := r.byName[n.Name]
		if c == nil {
			c = &refusal{name: n.Name}
			r.byName[n.Name] = c
		}
		pub.nets = append(pub.nets, refusedNet{prefixes: append([]netip.Prefix(nil), n.Prefixes...), r: c})
	}
	r.nets.Store(pub)
}

// refused counts, and when due logs, a query refused from client.
func (s *Server) refused(client netip.Addr) {
	r := s.refusals
	var c *refusal
	for _, n := range r.nets.Load().nets {
		for _, p := range n.prefixes {
			if p.Contains(client) {
				c = n.r
				break
			}
		}
		if c != nil {
			break
		}
	}
	if c == nil {
		c = r.unknown
	}
	c.count.Add(1)
	c.unlogged.Add(1)
	now := time.Now().UnixNano()
	if next := c.nextLog.Load(); now < next || !c.nextLog.CompareAndSwap(next, now+int64(refusedLogEvery)) {
		return
	}
	s.log.Warn("refused queries from a client outside the allowed networks (loopback, --allow, and the networks the probe proved); is its network exposed? (meshhost migrate status, meshhost dns-check)",
		"client", client, "network", c.name, "refused", c.unlogged.Swap(0), "next_line_in_seconds", refusedLogEvery.Seconds())
}

// refusedCollector exports the refusal counters.
type refusedCollector refusals

func (c *refusedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *refusedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, r := range c.byName {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(r.count.Load()), name)
	}
}
