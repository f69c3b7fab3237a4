package resolver

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchSize is how many datagrams one recvmmsg or sendmmsg call moves.
const batchSize = 32

// reqBufSize is the largest query read; longer datagrams are dropped. A
// query is a question and an OPT record (padded, at worst), well under this.
const reqBufSize = 2048

// respBufSize is the largest reply the fast path writes in place; a larger
// one (a name with dozens of addresses) takes the slow path.
const respBufSize = ednsSize

// mmsghdr is struct mmsghdr of recvmmsg(2); Go's alignment gives it the C
// layout on 32- and 64-bit platforms alike.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// udpBatch is one reader's memory, reused for every batch: the hot path
// allocates nothing.
type udpBatch struct {
	in, out       [batchSize]mmsghdr
	iovIn, iovOut [batchSize]unix.Iovec
	names         [batchSize]unix.RawSockaddrInet6 // an IPv4 sockaddr fits too
	reqs          [batchSize][reqBufSize]byte
	resps         [batchSize][respBufSize]byte
}

func newUDPBatch() *udpBatch {
	b := new(udpBatch)
	for i := range b.in {
		b.iovIn[i].Base = &b.reqs[i][0]
		b.in[i].hdr.Iov = &b.iovIn[i]
		b.in[i].hdr.SetIovlen(1)
		b.in[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.out[i].hdr.Iov = &b.iovOut[i]
		b.out[i].hdr.SetIovlen(1)
		b.out[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	}
	return b
}

// serveUDP reads batches of queries with recvmmsg, answers each, and sends
// the answers back with one sendmmsg, until the socket is closed.
func (s *Server) serveUDP(l *listener) {
	rc, err := l.udp.SyscallConn()
	if err != nil {
		s.log.Error("serving UDP", "addr", l.addr, "err", err)
		return
	}
	b := newUDPBatch()
	sc := new(scratch)
	// The syscall closures are made once: passed to RawConn as func values
	// they escape, and a closure per batch would be an allocation per batch.
	var n, nout, sent int
	var errno unix.Errno
	recv := func(fd uintptr) bool {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.in[0])), batchSize, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		n, errno = int(r), e
		return true
	}
	send := func(fd uintptr) bool {
		r, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.out[sent])), uintptr(nout-sent), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		if e != 0 || r == 0 {
			sent++ // drop this datagram, carry on with the rest
		} else {
			sent += int(r)
		}
		return true
	}
	for {
		for i := range b.in {
			b.iovIn[i].SetLen(reqBufSize)
			b.in[i].hdr.Namelen = unix.SizeofSockaddrInet6
			b.in[i].hdr.Flags = 0
		}
		n, errno = 0, 0
		if err := rc.Read(recv); err != nil {
			return // closed
		}
		if errno != 0 {
			if errno == unix.EBADF {
				return
			}
			continue // EINTR, ICMP errors reported on the socket, ...
		}
		nout = 0
		for i := range n {
			h := &b.in[i].hdr
			if h.Flags&unix.MSG_TRUNC != 0 {
				continue
			}
			client, ok := sockaddrAddrPort(&b.names[i])
			if !ok {
				continue
			}
			req := b.reqs[i][:b.in[i].n]
			resp := s.handle(req, client.Addr(), true, sc, b.resps[i][:], replyTo{udp: l.udp, addr: client})
			if resp == nil {
				continue
			}
			o := &b.out[nout]
			b.iovOut[nout].Base = &resp[0]
			b.iovOut[nout].SetLen(len(resp))
			o.hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
			o.hdr.Namelen = h.Namelen
			nout++
		}
		for sent = 0; sent < nout; {
			if err := rc.Write(send); err != nil {
				return
			}
		}
		// Forget the large slow-path replies so they can be collected.
		for i := range nout {
			b.iovOut[i].Base = nil
		}
	}
}

// sockaddrAddrPort decodes the sender address recvmmsg filled in.
func sockaddrAddrPort(sa *unix.RawSockaddrInet6) (netip.AddrPort, bool) {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), true
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port), true
	}
	return netip.AddrPort{}, false
}

// udpPending reports whether a datagram waits in the UDP socket's receive
// queue (SIOCINQ gives the size of the first one, 0 when there is none).
func (l *listener) udpPending() bool {
	rc, err := l.udp.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}
