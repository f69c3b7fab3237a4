package continuity

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/plumbing/netns"
)

// Netns sends lookups from inside a network namespace (a container's,
// say), from a socket of that namespace.
type Netns struct{ ns *netns.NS }

// JoinNetns starts a thread in the network namespace at path (such as
// /proc/PID/ns/net). Close ends it.
func JoinNetns(path string) (*Netns, error) {
	ns, err := netns.Join(path)
	if err != nil {
		return nil, err
	}
	return &Netns{ns}, nil
}

// Close ends the namespace's thread.
func (n *Netns) Close() { n.ns.Close() }

func (n *Netns) socket(ctx context.Context) (c *net.UDPConn, err error) {
	if doErr := n.ns.Do(ctx, func() { c, err = net.ListenUDP("udp", &net.UDPAddr{}) }); doErr != nil {
		return nil, doErr
	}
	return c, err
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
