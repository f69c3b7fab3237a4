package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"syscall"

	"github.com/meshhost/meshhost/internal/plumbing/syncs"
)

// listener is one address served over UDP and TCP.
type listener struct {
	addr netip.AddrPort
	// rcvbuf is the UDP receive buffer bind obtained, as the kernel
	// counts it (twice the usable bytes); 0 when unknown.
	rcvbuf int
	udp    *net.UDPConn
	tcp    *net.TCPListener

	conns tcpConns
	wg    sync.WaitGroup
}

// Listen serves addr over UDP and TCP. The address need not exist yet: a
// bridge gateway can be bound before the bridge is up (IP_FREEBIND). Listen
// refuses what cfg.Forbidden refuses (by default the gateways aardvark-dns
// serves on port 53), an unspecified address (replies would leave from the
// wrong source), and an address and port another socket holds: it never
// shares a port, so it can never take another server's queries. Port 0
// picks a free port; Listeners tells which.
func (s *Server) Listen(addr netip.AddrPort) error {
	_, err := s.listen(addr)
	return err
}

func (s *Server) listen(addr netip.AddrPort) (netip.AddrPort, error) {
	if !addr.IsValid() {
		return addr, errors.New("listen address is not valid; give ip:port")
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if addr.Addr().IsUnspecified() {
		return addr, fmt.Errorf("listen address %s is unspecified; give the address the clients use (e.g. the bridge gateway)", addr)
	}
	if err := s.cfg.Forbidden(addr); err != nil {
		return addr, fmt.Errorf("refusing to listen on %s: %w", addr, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return addr, errors.New("server is closed")
	}
	if _, ok := s.listeners[addr]; ok {
		return addr, fmt.Errorf("already listening on %s", addr)
	}
	l, err := bind(addr)
	if err != nil {
		return addr, err
	}
	addr = l.addr
	if _, ok := s.listeners[addr]; ok {
		l.close()
		return addr, fmt.Errorf("already listening on %s", addr)
	}
	if l.rcvbuf > 0 && l.rcvbuf < 2*udpRecvBuffer {
		s.rcvbufOnce.Do(func() {
			s.log.Info("the UDP receive buffer is smaller than asked: net.core.rmem_max caps it, and exceeding that (SO_RCVBUFFORCE) needs CAP_NET_ADMIN, which the resolver goes without; queries queued in a stall beyond it are dropped (raise the sysctl net.core.rmem_max to the asked bytes or more to give it all)",
				"addr", addr, "asked_bytes", udpRecvBuffer, "got_bytes", l.rcvbuf/2)
		})
	}
	s.serveLocked(l)
	s.log.Info("listening", "addr", addr)
	return addr, nil
}

// serveLocked registers l and starts its readers; s.mu must be held.
func (s *Server) serveLocked(l *listener) {
	syncs.AssertLocked(&s.mu)
	s.listeners[l.addr] = l
	s.publishOwn()

	// Readers share the one socket (no SO_REUSEPORT, see bind), one per
	// CPU the runtime uses, up to 4.
	readers := max(1, min(runtime.GOMAXPROCS(0), 4))
	for range readers {
		l.wg.Go(func() { s.serveUDP(l) })
	}
	l.wg.Go(func() { s.serveTCP(l) })
}

// Unlisten stops serving addr and waits for its readers to finish.
func (s *Server) Unlisten(addr netip.AddrPort) error {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	s.mu.Lock()
	l, ok := s.listeners[addr]
	delete(s.listeners, addr)
	s.publishOwn()
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("not listening on %s", addr)
	}
	s.log.Info("stopped listening", "addr", addr)
	return l.close()
}

// publishOwn stores the listener addresses, and the listeners for Busy;
// s.mu must be held.
func (s *Server) publishOwn() {
	own := make([]netip.AddrPort, 0, len(s.listeners))
	socks := make([]*listener, 0, len(s.listeners))
	for a, l := range s.listeners {
		own = append(own, a)
		socks = append(socks, l)
	}
	slices.SortFunc(own, netip.AddrPort.Compare)
	s.own.Store(&own)
	s.socks.Store(&socks)
	s.refreshTargets()
	s.kickLoopCheck() // a question can come back to a new listener
}

// Busy reports whether a query waits in the receive queue of one of the
// server's UDP sockets. A roster swap (validate, compile, save) steps aside
// while it does: with one CPU it would otherwise delay queries by up to the
// scheduler's 10 ms slice. Whoever reads a large roster beside the server,
// in its process, can pass Busy on for the same (specjson.Reader.Busy). It
// is cheap and safe for concurrent use.
func (s *Server) Busy() bool {
	socks := s.socks.Load()
	if socks == nil {
		return false
	}
	for _, l := range *socks {
		if l.udpPending() {
			return true
		}
	}
	return false
}

func (l *listener) close() error {
	err := errors.Join(l.udp.Close(), l.tcp.Close())
	l.conns.closeAll()
	l.wg.Wait()
	return err
}

// bind opens the UDP socket and the TCP listener of addr. Neither sets
// SO_REUSEPORT, and the UDP socket not SO_REUSEADDR, so binding fails when
// any other socket serves the address and port.
func bind(addr netip.AddrPort) (*listener, error) {
	udpNet, tcpNet := "udp4", "tcp4"
	if addr.Addr().Is6() {
		udpNet, tcpNet = "udp6", "tcp6"
	}
	lc := net.ListenConfig{Control: freebind}
	for attempt := 0; ; attempt++ {
		pc, err := lc.ListenPacket(context.Background(), udpNet, addr.String())
		if err != nil {
			return nil, inUse(addr, "UDP", err)
		}
		udp := pc.(*net.UDPConn)
		var rcvbuf int
		if rc, err := udp.SyscallConn(); err == nil {
			rcvbuf = growRecvBuffer(rc)
		}
		bound := udp.LocalAddr().(*net.UDPAddr).AddrPort()
		bound = netip.AddrPortFrom(bound.Addr().Unmap(), bound.Port())
		ln, err := lc.Listen(context.Background(), tcpNet, bound.String())
		if err != nil {
			udp.Close()
			if addr.Port() == 0 && attempt < 20 && errors.Is(err, syscall.EADDRINUSE) {
				continue // the free UDP port is taken for TCP: pick another
			}
			return nil, inUse(addr, "TCP", err)
		}
		return &listener{addr: bound, rcvbuf: rcvbuf, udp: udp, tcp: ln.(*net.TCPListener)}, nil
	}
}

func inUse(addr netip.AddrPort, proto string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s is already served by another socket (on a podman network gateway, port 53 is aardvark-dns's); listen on another address or port: %w", proto, addr, err)
	}
	return fmt.Errorf("listening on %s %s: %w", proto, addr, err)
}
