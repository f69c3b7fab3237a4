package resolver

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is what a Server needs. The zero value is usable: it answers
// loopback clients only and forwards to the nameservers of /etc/resolv.conf.
type Config struct {
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// Registerer gets the meshhost_resolver_* metrics; nil registers none.
	Registerer prometheus.Registerer

	// TTL is the TTL of roster answers; NegativeTTL that of NXDOMAIN and
	// NODATA answers (the SOA minimum). Both default to 5s.
	TTL, NegativeTTL time.Duration

	// Upstreams receive every question that is not the mesh's. Empty means
	// the nameservers of ResolvConf, re-read whenever that file changes.
	Upstreams []netip.AddrPort
	// ResolvConf is read when Upstreams is empty. Default /etc/resolv.conf.
	ResolvConf string
	// UpstreamTimeout bounds one attempt at one upstream. Default 2s.
	UpstreamTimeout time.Duration
	// NoLoopQuestions turns off the loop check's questions to the
	// upstreams (loop.go), for an upstream that must see only its
	// clients' questions (a test's counting stub): an upstream that is a
	// listener's own address is still left out, and logged.
	NoLoopQuestions bool

	// CacheSize is how many upstream answers are kept, for names outside
	// the mesh only: 0 means DefaultCacheSize, a negative size disables the
	// cache. An entry is at most 1232 bytes.
	CacheSize int
	// CacheMaxTTL caps how long an answer is kept (and the TTLs it is
	// served with): 0 means DefaultCacheMaxTTL, negative disables the
	// cache. CacheMaxNegativeTTL caps NXDOMAIN and NODATA answers, which
	// are otherwise kept as RFC 2308 says: 0 means
	// DefaultCacheMaxNegativeTTL, negative keeps none.
	CacheMaxTTL, CacheMaxNegativeTTL time.Duration

	// Allow lists the client networks that are answered, besides loopback
	// which always is. Every other client gets REFUSED.
	Allow []netip.Prefix

	// StatePath is where the last good roster is kept: written atomically by
	// Update and loaded by New. Empty keeps nothing.
	StatePath string

	// Forbidden vets an address before Listen binds it and returns why it
	// must not be bound. Nil uses PodmanDNSGuard over podman's default
	// network directories, which refuses the gateways that aardvark-dns
	// serves.
	Forbidden func(netip.AddrPort) error

	// stateFaults injects faults at the saved roster's write steps
	// (tests in this package); nil in production.
	stateFaults deltalog.Faults
}

const (
	defaultTTL             = 5 * time.Second
	defaultUpstreamTimeout = 2 * time.Second
	defaultResolvConf      = "/etc/resolv.conf"
	// ednsSize is the UDP payload size the server advertises (the DNS flag
	// day 2020 value, which avoids IP fragmentation).
	ednsSize = 1232
	// maxForwards bounds the forwarded questions in flight; beyond it new
	// ones get SERVFAIL rather than a goroutine each.
	maxForwards = 1024
)

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.TTL <= 0 {
		c.TTL = defaultTTL
	}
	if c.NegativeTTL <= 0 {
		c.NegativeTTL = defaultTTL
	}
	if c.ResolvConf == "" {
		c.ResolvConf = defaultResolvConf
	}
	if c.UpstreamTimeout <= 0 {
		c.UpstreamTimeout = defaultUpstreamTimeout
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.CacheMaxTTL == 0 {
		c.CacheMaxTTL = DefaultCacheMaxTTL
	}
	if c.CacheMaxNegativeTTL == 0 {
		c.CacheMaxNegativeTTL = DefaultCacheMaxNegativeTTL
	}
	if c.Forbidden == nil {
		c.Forbidden = PodmanDNSGuard()
	}
	return c
}

func seconds(d time.Duration) uint32 {
	s := d / time.Second
	if s < 0 {
		return 0
	}
	if s > 1<<31-1 {
		return 1<<31 - 1
	}
	return uint32(s)
}
