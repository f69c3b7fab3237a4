package resolver

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// freebind lets a socket bind an address the machine does not have yet, such
// as the gateway of a podman bridge that exists only while a container is
// attached.
func freebind(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if network == "udp6" || network == "tcp6" {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// udpRecvBuffer is the receive buffer asked for each UDP socket: about 5000
// queued queries, so a stall of the process (a roster swap on a single CPU,
// a GC pause) delays queries instead of dropping them.
const udpRecvBuffer = 4 << 20

// growRecvBuffer asks for a receive buffer of udpRecvBuffer bytes, beyond
// the net.core.rmem_max limit when the process may (SO_RCVBUFFORCE needs
// CAP_NET_ADMIN, which the resolver's unit does not grant), else up to
// that limit (SO_RCVBUF). It returns the size the socket has, as the
// kernel counts it (which doubles what it was asked for, for its own
// bookkeeping); 0 when that cannot be read.
func growRecvBuffer(c syscall.RawConn) int {
	var got int
	c.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, udpRecvBuffer) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, udpRecvBuffer)
		}
		got, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	return got
}
