//go:build !linux

package resolver

// serveUDP answers one datagram at a time where recvmmsg is not available.
func (s *Server) serveUDP(l *listener) {
	req := make([]byte, 4096)
	resp := make([]byte, 4096)
	sc := new(scratch)
	for {
		n, client, err := l.udp.ReadFromUDPAddrPort(req)
		if err != nil {
			return
		}
		if out := s.handle(req[:n], client.Addr(), true, sc, resp, replyTo{udp: l.udp, addr: client}); out != nil {
			l.udp.WriteToUDPAddrPort(out, client)
		}
	}
}

// udpPending cannot look into the receive queue here: long computations do
// not step aside for queries.
func (l *listener) udpPending() bool { return false }
