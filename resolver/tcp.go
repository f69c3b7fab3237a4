package resolver

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

const (
	// tcpIdle closes a TCP connection that sends nothing for this long.
	tcpIdle = 10 * time.Second
	// maxTCPConns bounds the TCP connections of one listener.
	maxTCPConns = 256
)

// tcpConn is one client connection; forwarded answers may be written from
// other goroutines, so writes are serialized.
type tcpConn struct {
	c net.Conn
	// mu guards writes to c, and broken.
	mu     sync.Mutex
	broken bool // a write failed (or timed out): c is closed
}

func (t *tcpConn) write(b []byte) { t.writeFramed(frame(b)) }

// frame prefixes a message with its length, in a new slice.
func frame(b []byte) []byte {
	msg := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(msg, uint16(len(b)))
	copy(msg[2:], b)
	return msg
}

// writeFramed writes a framed message. A client that does not take it
// within tcpIdle loses its connection, so that it holds up no more writes.
func (t *tcpConn) writeFramed(msg []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broken {
		return
	}
	t.c.SetWriteDeadline(time.Now().Add(tcpIdle))
	if _, err := t.c.Write(msg); err != nil {
		t.broken = true
		t.c.Close()
	}
}

// tcpConns tracks a listener's connections so Unlisten can close them.
type tcpConns struct {
	// mu guards set.
	mu  sync.Mutex
	set map[*tcpConn]struct{}
}

func (cs *tcpConns) add(c *tcpConn) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.set == nil {
		cs.set = map[*tcpConn]struct{}{}
	}
	if len(cs.set) >= maxTCPConns {
		return false
	}
	cs.set[c] = struct{}{}
	return true
}

func (cs *tcpConns) remove(c *tcpConn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.set, c)
}

func (cs *tcpConns) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for c := range cs.set {
		c.c.Close()
	}
}

// serveTCP accepts connections until the listener is closed.
func (s *Server) serveTCP(l *listener) {
	for {
		c, err := l.tcp.Accept()
		if err != nil {
			return
		}
		tc := &tcpConn{c: c}
		if !l.conns.add(tc) {
			c.Close()
			continue
		}
		l.wg.Go(func() {
			defer l.conns.remove(tc)
			defer c.Close()
			s.serveTCPConn(tc)
		})
	}
}

// serveTCPConn answers length-prefixed queries, pipelined, until the client
// goes quiet or sends garbage.
func (s *Server) serveTCPConn(tc *tcpConn) {
	ap := tc.c.RemoteAddr().(*net.TCPAddr).AddrPort()
	client := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	sc := new(scratch)
	buf := make([]byte, 4096) // larger replies take the slow path
	req := make([]byte, 512)
	var lb [2]byte
	for {
		tc.c.SetReadDeadline(time.Now().Add(tcpIdle))
		if _, err := io.ReadFull(tc.c, lb[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lb[:]))
		if n > len(req) {
			req = make([]byte, n)
		}
		if _, err := io.ReadFull(tc.c, req[:n]); err != nil {
			return
		}
		if resp := s.handle(req[:n], client.Addr(), false, sc, buf, replyTo{tcp: tc}); resp != nil {
			tc.write(resp)
		}
	}
}
