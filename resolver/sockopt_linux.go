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

// growRecvBuffer enlarges the socket's receive buffer, beyond the
// net.core.rmem_max limit when the process may (CAP_NET_ADMIN).
func growRecvBuffer(c syscall.RawConn) {
	c.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, udpRecvBuffer) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, udpRecvBuffer)
		}
	})
}
