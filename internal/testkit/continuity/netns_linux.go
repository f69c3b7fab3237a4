package continuity

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"codeberg.org/miekg/dns"
	"golang.org/x/sys/unix"
)

// Netns makes sockets inside a network namespace (a container's, say) for
// lookups sent from there: a thread of this process joins the namespace
// and stays in it, and each socket it opens belongs to the namespace for
// good, whichever goroutine then uses it.
type Netns struct {
	reqs chan chan socketOrErr
	stop chan struct{}
}

type socketOrErr struct {
	c   *net.UDPConn
	err error
}

// JoinNetns starts a thread in the network namespace at path (such as
// /proc/PID/ns/net). Close ends it.
func JoinNetns(path string) (*Netns, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	n := &Netns{reqs: make(chan chan socketOrErr), stop: make(chan struct{})}
	joined := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it stays in the namespace, and
		// the runtime ends it when this goroutine returns.
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
				c, err := net.ListenUDP("udp", &net.UDPAddr{})
				r <- socketOrErr{c, err}
			}
		}
	}()
	if err := <-joined; err != nil {
		return nil, fmt.Errorf("joining network namespace %s: %w", path, err)
	}
	return n, nil
}

// Close ends the namespace's thread.
func (n *Netns) Close() { close(n.stop) }

func (n *Netns) socket(ctx context.Context) (*net.UDPConn, error) {
	r := make(chan socketOrErr, 1)
	select {
	case n.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.stop:
		return nil, errors.New("namespace closed")
	}
	s := <-r
	return s.c, s.err
}

// UDP asks server, from inside the namespace, for name's A record, from a
// fresh socket each time as a container's stub resolver does, and wants
// want among the answers.
func (n *Netns) UDP(server netip.AddrPort, name string, want netip.Addr) Lookup {
	fqdn := name
	if fqdn == "" || fqdn[len(fqdn)-1] != '.' {
		fqdn += "."
	}
	return func(ctx context.Context) error {
		c, err := n.socket(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		m := dns.NewMsg(fqdn, dns.TypeA)
		var id [2]byte
		rand.Read(id[:])
		m.ID = binary.BigEndian.Uint16(id[:])
		if err := m.Pack(); err != nil {
			return err
		}
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		} else {
			c.SetDeadline(time.Now().Add(time.Second))
		}
		if _, err := c.WriteToUDPAddrPort(m.Data, server); err != nil {
			return err
		}
		buf := make([]byte, 4096)
		for {
			k, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return err
			}
			if from.Addr().Unmap() != server.Addr() || k < 12 || binary.BigEndian.Uint16(buf[:2]) != m.ID {
				continue
			}
			r := &dns.Msg{Data: buf[:k]}
			if err := r.Unpack(); err != nil {
				return err
			}
			return CheckA(r, want)
		}
	}
}
