// Package dnstest holds the DNS client tests use to ask a resolver.
package dnstest

import (
	"context"
	"net"
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
