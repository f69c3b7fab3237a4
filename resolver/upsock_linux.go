package resolver

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// upBatch is how many replies one recvmmsg call reads from an upstream
// socket.
const upBatch = 8

// replyBatch is one upstream socket reader's memory, reused for every batch.
type replyBatch struct {
	hdrs [upBatch]mmsghdr
	iovs [upBatch]unix.Iovec
	bufs [upBatch][replyBufSize]byte
}

// read reads s's replies in batches and delivers them, until s is closed.
func (s *upSock) read() {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		s.fail(err)
		return
	}
	b := new(replyBatch)
	for i := range b.hdrs {
		b.iovs[i].Base = &b.bufs[i][0]
		b.hdrs[i].hdr.Iov = &b.iovs[i]
		b.hdrs[i].hdr.SetIovlen(1)
	}
	var n int
	var errno unix.Errno
	recv := func(fd uintptr) bool {
		r, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), upBatch, unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		n, errno = int(r), e
		return true
	}
	for {
		for i := range b.hdrs {
			b.iovs[i].SetLen(replyBufSize)
			b.hdrs[i].hdr.Flags = 0
		}
		n, errno = 0, 0
		if err := rc.Read(recv); err != nil {
			return // closed
		}
		switch errno {
		case 0:
		case unix.ECONNREFUSED:
			// ICMP port unreachable: nothing listens there now.
			s.fail(errno)
			return
		case unix.EBADF:
			return
		default:
			continue
		}
		for i := range n {
			s.deliver(b.bufs[i][:b.hdrs[i].n], b.hdrs[i].hdr.Flags&unix.MSG_TRUNC != 0)
		}
	}
}
