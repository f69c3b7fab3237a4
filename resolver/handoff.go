package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"
)

// ListenerFiles are the two sockets of one served address as files, so
// that another process (or another Server) can serve them: Files hands
// them out, ListenFiles takes them in.
type ListenerFiles struct {
	Addr netip.AddrPort
	UDP  *os.File // the UDP socket
	TCP  *os.File // the listening TCP socket
}

// Close closes both files.
func (f ListenerFiles) Close() error {
	var errs []error
	for _, x := range []*os.File{f.UDP, f.TCP} {
		if x != nil {
			errs = append(errs, x.Close())
		}
	}
	return errors.Join(errs...)
}

// Files returns a duplicate of every listener's sockets, in address order.
// The caller owns them and closes them. Serving them in another process
// while this Server still reads them is safe: each datagram and each
// connection goes to one reader. That is how a resolver is replaced
// without a moment where its addresses are not served (see Drain), and
// how systemd keeps them across a crash (its file descriptor store).
func (s *Server) Files() ([]ListenerFiles, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ListenerFiles, 0, len(s.listeners))
	for _, l := range s.listeners {
		u, err := l.udp.File()
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("duplicating the UDP socket of %s: %w", l.addr, err)
		}
		t, err := l.tcp.File()
		if err != nil {
			u.Close()
			closeAll(out)
			return nil, fmt.Errorf("duplicating the TCP socket of %s: %w", l.addr, err)
		}
		out = append(out, ListenerFiles{Addr: l.addr, UDP: u, TCP: t})
	}
	slices.SortFunc(out, func(a, b ListenerFiles) int { return a.Addr.Compare(b.Addr) })
	return out, nil
}

func closeAll(fs []ListenerFiles) {
	for _, f := range fs {
		f.Close()
	}
}

// ListenFiles serves sockets bound elsewhere: a UDP socket and a listening
// TCP socket of one address, handed over by the process that served them
// before (Files) or kept by systemd. The sockets stay what they were, so
// the queries queued in them are answered and the address is never
// unserved. The files are duplicated: the caller still closes its own.
// ListenFiles refuses sockets of the wrong kind, of two different
// addresses, and an address already served; it returns the address.
func (s *Server) ListenFiles(udp, tcp *os.File) (netip.AddrPort, error) {
	if udp == nil || tcp == nil {
		return netip.AddrPort{}, errors.New("both the UDP and the TCP socket are needed")
	}
	pc, err := net.FilePacketConn(udp)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("adopting UDP socket %q: %w", udp.Name(), err)
	}
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return netip.AddrPort{}, fmt.Errorf("adopting %q: not a UDP socket", udp.Name())
	}
	ln, err := net.FileListener(tcp)
	if err != nil {
		uc.Close()
		return netip.AddrPort{}, fmt.Errorf("adopting TCP socket %q: %w", tcp.Name(), err)
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		uc.Close()
		ln.Close()
		return netip.AddrPort{}, fmt.Errorf("adopting %q: not a listening TCP socket", tcp.Name())
	}
	ua := unmapped(uc.LocalAddr().(*net.UDPAddr).AddrPort())
	ta := unmapped(tl.Addr().(*net.TCPAddr).AddrPort())
	fail := func(err error) (netip.AddrPort, error) {
		uc.Close()
		tl.Close()
		return ua, err
	}
	if ua != ta {
		return fail(fmt.Errorf("the UDP socket serves %s and the TCP socket %s; they must serve one address", ua, ta))
	}
	if ua.Addr().IsUnspecified() || ua.Port() == 0 {
		return fail(fmt.Errorf("the handed-over sockets are bound to %s, not an address and port", ua))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fail(errors.New("server is closed"))
	}
	if _, ok := s.listeners[ua]; ok {
		return fail(fmt.Errorf("already listening on %s", ua))
	}
	s.serveLocked(&listener{addr: ua, udp: uc, tcp: tl})
	s.log.Info("listening on a handed-over socket", "addr", ua)
	return ua, nil
}

func unmapped(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// Drain stops reading every listener's sockets without closing them (the
// process they were handed to goes on reading them), answers what was
// read already, forwarded questions included, until they are done or ctx
// ends, and then closes the server. Open TCP connections are closed once
// reading stops: their clients reconnect, to whoever serves the listening
// socket now.
//
// ctx bounds the wait for forwarded questions, which an upstream may take
// seconds to answer, or never. When the sockets live on elsewhere (handed
// to a successor, or kept in systemd's store for the next process) keep
// it short: a question dropped here is asked again by its client, after
// its stub resolver's timeout, and answered by whoever reads the sockets
// then; while this process waits for a silent upstream, the next one
// (systemd starts it only once this one has exited) reads nothing.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	ls := make([]*listener, 0, len(s.listeners))
	for _, l := range s.listeners {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	past := time.Unix(1, 0)
	for _, l := range ls {
		// A deadline belongs to this process's descriptor, not to the
		// socket: the other process's reads go on.
		l.udp.SetReadDeadline(past)
		l.tcp.SetDeadline(past)
		l.conns.closeAll()
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for _, l := range ls {
		done := make(chan struct{})
		go func() { l.wg.Wait(); close(done) }()
		for waiting := true; waiting; {
			select {
			case <-done:
				waiting = false
			case <-tick.C:
				l.conns.closeAll() // one accepted just before the deadline
			}
		}
	}
	for s.inflight.Load() > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	if n := s.inflight.Load(); n > 0 {
		s.log.Info("drained; forwarded questions left unanswered (their clients ask again, and whoever reads the sockets answers)", "forwards", n)
	}
	return s.Close()
}
