//go:build !linux

package resolver

import "syscall"

// freebind does nothing outside Linux: addresses must exist before Listen.
func freebind(network, address string, c syscall.RawConn) error { return nil }

// udpRecvBuffer is the receive buffer asked for on Linux; elsewhere the
// system's default is kept.
const udpRecvBuffer = 0

// growRecvBuffer keeps the system's default outside Linux.
func growRecvBuffer(c syscall.RawConn) int { return 0 }
