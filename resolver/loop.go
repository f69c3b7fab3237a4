package resolver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/syncs"
)

// Upstream loops. An upstream that is this resolver itself (a resolv.conf
// naming its own listen address, or a resolver that forwards back here)
// turns every forwarded question into a question to itself until the
// timeout: SERVFAIL, and nothing said why. Two checks find one, and either
// way the upstream is left out of the forward targets and logged once, with
// the upstream's address and the resolver's own:
//
//   - by address, whenever the upstreams or the listeners change
//     (refreshTargets): an upstream that is a listener's address, or on
//     the port of a wildcard listener at a loopback or wildcard address;
//   - by question, at the start, whenever the upstreams or the listeners
//     change, and every loopCheckEvery: each upstream is asked a name of
//     its own, <random>.loop-check.meshhost.invalid. If that question
//     arrives at one of this resolver's listeners, whatever the path (the
//     upstream is an address of this machine, or a resolver that forwards
//     back here), the upstream loops. The question that came back is
//     answered REFUSED, so the chain unwinds at once. A looping upstream
//     is forwarded to again once its question gets an answer (NOERROR or
//     NXDOMAIN) without coming back: not merely when it does not come
//     back, for two resolvers that found their loop both answer SERVFAIL,
//     and would otherwise take each other back, loop again, and flap.

const (
	// loopCheckEvery is how often the upstreams are asked whether they
	// loop, besides whenever they or the listeners change.
	loopCheckEvery = time.Minute
	// loopSuffix ends every loop check's name: .invalid is never
	// delegated (RFC 6761), so an upstream that is no loop answers
	// NXDOMAIN at once, from its cache or the root's.
	loopSuffix = "loop-check.meshhost.invalid"
)

// loops is the loop check's state.
type loops struct {
	// asking is the number of questions in flight (asked), for the
	// query path's cheap test before it looks a name up.
	asking atomic.Int32
	// kick asks for a check now (buffered: one pending is enough).
	kick chan struct{}

	// mu guards the fields below.
	mu sync.Mutex
	// asked maps a check's wire name to the upstream it was sent to.
	asked map[string]netip.AddrPort
	// looping holds the upstreams found to loop, by their question.
	looping map[netip.AddrPort]bool
	// ownLogged holds the upstreams logged as the resolver's own address.
	ownLogged map[netip.AddrPort]bool
}

func newLoops() *loops {
	return &loops{kick: make(chan struct{}, 1), asked: map[string]netip.AddrPort{},
		looping: map[netip.AddrPort]bool{}, ownLogged: map[netip.AddrPort]bool{}}
}

// forgetBut forgets the loops of upstreams not among ups (no longer
// configured).
func (l *loops) forgetBut(ups []netip.AddrPort) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for u := range l.looping {
		if !slices.Contains(ups, u) {
			delete(l.looping, u)
		}
	}
}

// isLooping reports whether u was found to loop.
func (l *loops) isLooping(u netip.AddrPort) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.looping[u]
}

// ownAddress reports whether upstream u is this resolver, by address:
// one of its listeners, or on the port of a wildcard listener at a
// loopback or wildcard address.
func ownAddress(u netip.AddrPort, own []netip.AddrPort) bool {
	for _, o := range own {
		switch {
		case o == u:
			return true
		case o.Port() == u.Port() && o.Addr().IsUnspecified() && (u.Addr().IsLoopback() || u.Addr().IsUnspecified()):
			return true
		}
	}
	return false
}

// logOwnLocked logs, once for each, the upstreams left out for being this
// resolver's own address; whether none is left to forward to too.
// s.targetsMu must be held.
func (s *Server) logOwnLocked(ups, own, targets []netip.AddrPort) {
	syncs.AssertLocked(&s.targetsMu)
	s.loops.mu.Lock()
	defer s.loops.mu.Unlock()
	for _, u := range ups {
		if !ownAddress(u, own) {
			delete(s.loops.ownLogged, u)
			continue
		}
		if s.loops.ownLogged[u] {
			continue
		}
		s.loops.ownLogged[u] = true
		s.log.Error("upstream loop: the upstream is this resolver's own listen address; not forwarding to it (is /etc/resolv.conf, or --upstream, naming the resolver itself?)",
			"upstream", u.String(), "listen", fmt.Sprint(own), "upstreams_left", len(targets))
	}
}

// loopCheck sends loop checks at start, when kicked and every
// loopCheckEvery, until ctx ends.
func (s *Server) loopCheck(ctx context.Context) {
	if s.cfg.NoLoopQuestions {
		return
	}
	t := time.NewTicker(loopCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.loops.kick:
		case <-t.C:
		}
		s.checkLoops(ctx)
	}
}

// kickLoopCheck asks for a loop check soon.
func (s *Server) kickLoopCheck() {
	if s.cfg.NoLoopQuestions {
		return
	}
	select {
	case s.loops.kick <- struct{}{}:
	default:
	}
}

// checkLoops asks every configured upstream a loop check's question, and
// waits for them to come back (or not).
func (s *Server) checkLoops(ctx context.Context) {
	p := s.upstream.Load()
	if p == nil || len(*p) == 0 || len(*s.own.Load()) == 0 {
		return // nothing to ask, or nowhere a question could come back to
	}
	ups := loopCheckTargets(*p, *s.own.Load(), localAddrs())
	if len(ups) == 0 {
		return
	}
	names := make(map[netip.AddrPort]string, len(ups))
	s.loops.mu.Lock()
	for _, u := range ups {
		var b [8]byte
		rand.Read(b[:])
		name, _ := wireName(hex.EncodeToString(b[:]) + "." + loopSuffix) // a valid name
		s.loops.asked[string(name)] = u
		names[u] = string(name)
	}
	s.loops.asking.Add(int32(len(ups)))
	s.loops.mu.Unlock()
	var wg sync.WaitGroup
	rcodes := make([]int, len(ups))
	for i, u := range ups {
		wg.Go(func() { rcodes[i] = askOnce(ctx, u, []byte(names[u]), s.cfg.UpstreamTimeout) })
	}
	wg.Wait()
	// A question that came back did so by now (askOnce waited for the
	// answer, or the timeout): those still asked did not.
	var cleared []netip.AddrPort
	s.loops.mu.Lock()
	for i, u := range ups {
		name := names[u]
		if _, still := s.loops.asked[name]; still {
			delete(s.loops.asked, name)
			s.loops.asking.Add(-1)
			if s.loops.looping[u] && (rcodes[i] == rcodeSuccess || rcodes[i] == rcodeNXDomain) {
				delete(s.loops.looping, u)
				cleared = append(cleared, u)
			}
		}
	}
	s.loops.mu.Unlock()
	if len(cleared) > 0 {
		s.refreshTargets() // in force before it is said
	}
	for _, u := range cleared {
		s.log.Info("upstream loop: the upstream no longer forwards back to this resolver; forwarding to it again", "upstream", u.String())
	}
}

// cameBack reports whether the question for wire name qname is one of
// the loop checks this resolver asked, and if so records the loop of its
// upstream (logged the first time). client is where it came from.
func (s *Server) cameBack(qname []byte, client netip.Addr) bool {
	if s.loops.asking.Load() == 0 {
		return false
	}
	s.loops.mu.Lock()
	u, ok := s.loops.asked[string(qname)]
	if !ok {
		s.loops.mu.Unlock()
		return false
	}
	delete(s.loops.asked, string(qname))
	s.loops.asking.Add(-1)
	first := !s.loops.looping[u]
	s.loops.looping[u] = true
	s.loops.mu.Unlock()
	if first {
		s.refreshTargets() // in force before it is said
		left := len(s.upstreams())
		s.log.Error("upstream loop: a question forwarded to the upstream came back to this resolver; not forwarding to it (does it forward to this resolver, or is it this machine's own address?)",
			"upstream", u.String(), "listen", fmt.Sprint(s.Listeners()), "came_back_from", client.String(), "upstreams_left", left)
	}
	return true
}

// askOnce sends upstream u a query for wire name qname and waits for an
// answer, returning its rcode, or -1 when none came before the timeout.
func askOnce(ctx context.Context, u netip.AddrPort, qname []byte, timeout time.Duration) int {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(u))
	if err != nil {
		return -1
	}
	defer c.Close()
	q := make([]byte, headerLen, headerLen+len(qname)+4)
	var id [2]byte
	rand.Read(id[:])
	copy(q, id[:])
	q[2] = 0x01 // RD
	q[5] = 1    // QDCOUNT
	q = append(q, qname...)
	q = binary.BigEndian.AppendUint16(q, typeA)
	q = binary.BigEndian.AppendUint16(q, classIN)
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write(q); err != nil {
		return -1
	}
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return -1
		}
		if n >= headerLen && buf[0] == id[0] && buf[1] == id[1] && buf[2]&0x80 != 0 {
			return int(buf[3] & 0x0F)
		}
	}
}

// loopCheckTargets returns the upstreams a loop check asks: those on this
// machine (loopback, or an address of its interfaces, local) that are not
// one of own, the resolver's listen addresses (left out, and logged,
// already). An upstream on another machine is not asked: it cannot reach
// the addresses the resolver listens on (loopback, bridge gateways), and a
// question to it would be traffic off the machine for a loop that cannot
// be (a resolver told to --listen on an address other machines reach is
// the exception, and is not checked by question).
func loopCheckTargets(ups, own []netip.AddrPort, local map[netip.Addr]bool) []netip.AddrPort {
	var out []netip.AddrPort
	for _, u := range ups {
		if !ownAddress(u, own) && (u.Addr().IsLoopback() || local[u.Addr().Unmap()]) {
			out = append(out, u)
		}
	}
	return out
}

// localAddrs returns the addresses of this machine's interfaces (none when
// they cannot be read).
func localAddrs() map[netip.Addr]bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}
