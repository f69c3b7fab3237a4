// Package dnstest holds the DNS client tests use to ask a resolver.
package dnstest

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
)

// Exchange sends m to addr over network and waits at most timeout for the
// reply. miekg/dns's own Exchange bounds the read by its transport's 2 s
// ReadTimeout whatever the context says, so a test that relied on a
// shorter context deadline measured the library's timeout, not the server.
func Exchange(m *dns.Msg, network, addr string, timeout time.Duration) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := &dns.Client{Transport: &dns.Transport{
		Dialer:       &net.Dialer{Timeout: timeout},
		ReadTimeout:  timeout,
		WriteTimeout: timeout,
	}}
	r, _, err := c.Exchange(ctx, m, network, addr)
	return r, err
}

// FreePort returns a loopback address whose port is free for both UDP and
// TCP, as a resolver listening on it binds both. It is free when checked:
// the caller binds it later. The port is drawn below the kernel's
// ephemeral range (32768-60999 on Linux), which every outgoing connection
// and every ":0" bind draws from, so another test's sockets do not take it
// in between; a rare clash with a test that picked the same port is still
// possible.
func FreePort(t testing.TB) netip.AddrPort {
	t.Helper()
	for range 50 {
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(20000+rand.IntN(12000)))
		pc, err := net.ListenPacket("udp4", a.String())
		if err != nil {
			continue
		}
		ln, err := net.Listen("tcp4", a.String())
		pc.Close()
		if err == nil {
			ln.Close()
			return a
		}
	}
	t.Fatal("no loopback port free for both UDP and TCP in 50 tries")
	return netip.AddrPort{}
}
