package dnscheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netns makes sockets inside a network namespace: a thread of this process
// joins the namespace and stays there (it is never unlocked, so the
// runtime ends it with its goroutine), and a socket made there belongs to
// the namespace for good, whichever goroutine uses it.
type netns struct {
	reqs chan dialReq
	stop chan struct{}
}

type dialReq struct {
	server netip.AddrPort
	reply  chan dialed
}

type dialed struct {
	c   *net.UDPConn
	err error
}

// joinNetns starts a thread in the network namespace at path (such as
// /proc/PID/ns/net). close ends it.
func joinNetns(path string) (*netns, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the container's network namespace: %w", err)
	}
	n := &netns{reqs: make(chan dialReq), stop: make(chan struct{})}
	joined := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		joined <- err
		if err != nil {
			return
		}
		for {
			select {
			case <-n.stop:
				return
			case r := <-n.reqs:
				// A connected socket: the kernel picks the source address
				// as the container's routes say, and reports an ICMP port
				// unreachable as ECONNREFUSED.
				c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server4or6(r.server)))
				r.reply <- dialed{c, err}
			}
		}
	}()
	if err := <-joined; err != nil {
		return nil, fmt.Errorf("joining the container's network namespace %s (meshhost dns-check needs root): %w", path, err)
	}
	return n, nil
}

func (n *netns) close() { close(n.stop) }

// dial returns a UDP socket inside the namespace, connected to server.
func (n *netns) dial(ctx context.Context, server netip.AddrPort) (*net.UDPConn, error) {
	r := dialReq{server: server, reply: make(chan dialed, 1)}
	select {
	case n.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.stop:
		return nil, errors.New("namespace closed")
	}
	d := <-r.reply
	return d.c, d.err
}

func server4or6(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}
