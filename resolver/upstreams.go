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

// setUpstreams publishes the forward targets.
func (s *Server) setUpstreams(ups []netip.AddrPort) {
	c := slices.Clone(ups)
	s.upstream.Store(&c)
}

// upstreams returns the forward targets, leaving out this server's own
// listeners so that a resolv.conf pointing at us cannot make a loop.
func (s *Server) upstreams() []netip.AddrPort {
	p := s.upstream.Load()
	if p == nil {
		return nil
	}
	own := *s.own.Load()
	out := make([]netip.AddrPort, 0, len(*p))
	for _, u := range *p {
		if !slices.Contains(own, u) {
			out = append(out, u)
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
