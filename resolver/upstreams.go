package resolver

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/filewatch"
)

// setUpstreams publishes the forward targets, and has them checked for
// loops.
func (s *Server) setUpstreams(ups []netip.AddrPort) {
	c := slices.Clone(ups)
	s.upstream.Store(&c)
	s.loops.forgetBut(c)
	s.refreshTargets()
	s.kickLoopCheck()
}

// refreshTargets recomputes the forward targets: the upstreams less those
// that are this server (its own listeners, or found to loop back to it: see
// loop.go), so that a resolv.conf pointing at us cannot make a loop. It
// runs when any of them changes.
func (s *Server) refreshTargets() {
	s.targetsMu.Lock()
	defer s.targetsMu.Unlock()
	var out, ups []netip.AddrPort
	own := *s.own.Load()
	if p := s.upstream.Load(); p != nil {
		ups = *p
		for _, u := range ups {
			if !ownAddress(u, own) && !s.loops.isLooping(u) {
				out = append(out, u)
			}
		}
	}
	s.targets.Store(&out)
	s.logOwnLocked(ups, own, out)
}

// upstreams returns the forward targets; the caller must not change them.
func (s *Server) upstreams() []netip.AddrPort {
	if p := s.targets.Load(); p != nil {
		return *p
	}
	return nil
}

// Upstream health: an upstream that timed out, whose port refused (ICMP),
// or that answered SERVFAIL or REFUSED is skipped (tried after the healthy
// ones, so still tried when all fail) for downFor, twice as long after each
// further failure up to maxDownFor; once that time is over it is tried
// first again, and its first answer (any other reply) makes it healthy.
const (
	downFor    = 2 * time.Second
	maxDownFor = time.Minute
)

// failed records that addr did not answer.
func (f *forwarder) failed(addr netip.AddrPort, err error) {
	f.s.metrics.upstreamFailures.Inc()
	u := f.upstream(addr)
	if u == nil {
		return
	}
	now := time.Now()
	u.mu.Lock()
	u.fails++
	base := time.Duration(f.downFor.Load())
	d := min(base<<min(u.fails-1, 10), max(maxDownFor, base))
	u.downTill = now.Add(d)
	first := u.fails == 1
	u.mu.Unlock()
	if first {
		f.s.log.Warn("upstream failed; asking the others first", "upstream", addr, "retry_in_seconds", d.Seconds(), "err", err)
	}
}

// succeeded records an answer from u.
func (u *upstream) succeeded() {
	u.mu.Lock()
	was := u.fails
	u.fails = 0
	u.mu.Unlock()
	if was > 0 {
		u.f.s.log.Info("upstream answers again", "upstream", u.addr)
	}
}

// down reports whether u is being skipped at now.
func (u *upstream) down(now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.fails > 0 && now.Before(u.downTill)
}

// order returns targets with those being skipped moved to the end, in
// their order. It returns targets itself when none is.
func (f *forwarder) order(targets []netip.AddrPort) []netip.AddrPort {
	if len(targets) < 2 {
		return targets
	}
	now := time.Now()
	var down []bool
	f.mu.Lock()
	for i, t := range targets {
		if u := f.pools[t]; u != nil && u.down(now) {
			if down == nil {
				down = make([]bool, len(targets))
			}
			down[i] = true
		}
	}
	f.mu.Unlock()
	if down == nil {
		return targets
	}
	out := make([]netip.AddrPort, 0, len(targets))
	for i, t := range targets {
		if !down[i] {
			out = append(out, t)
		}
	}
	for i, t := range targets {
		if down[i] {
			out = append(out, t)
		}
	}
	return out
}

// parseResolvConf returns the nameservers of a resolv.conf, on port 53.
func parseResolvConf(data []byte) []netip.AddrPort {
	var out []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
	}
	return out
}

// watchResolvConf loads the upstreams from cfg.ResolvConf and reloads them
// whenever the file changes (written, replaced or renamed over).
func (s *Server) watchResolvConf() error {
	path := s.cfg.ResolvConf
	load := func() {
		data, err := os.ReadFile(path)
		if err != nil {
			s.log.Warn("reading upstream nameservers", "path", path, "err", err)
			return
		}
		ups := parseResolvConf(data)
		if len(ups) == 0 {
			s.log.Warn("no nameserver lines; forwarded questions get SERVFAIL", "path", path)
		}
		s.setUpstreams(ups)
		s.log.Info("upstream nameservers", "path", path, "servers", ups)
	}
	load()
	w, err := filewatch.New(path)
	if err != nil {
		return fmt.Errorf("watching %q for upstream nameservers: %w", path, err)
	}
	s.wg.Go(func() { w.Run(s.ctx, 50*time.Millisecond, load) })
	return nil
}
