//go:build !linux

package resolver

import "syscall"

// freebind does nothing outside Linux: addresses must exist before Listen.
func freebind(network, address string, c syscall.RawConn) error { return nil }

// growRecvBuffer keeps the system's default outside Linux.
func growRecvBuffer(c syscall.RawConn) {}
