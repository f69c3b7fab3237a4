// Package netflag holds the flag values for network addresses that
// meshhost's commands share, so that a flag accepts the same forms in every
// command (`meshhost agent`, `meshhost resolver`, `meshhost-resolver`): each
// is a list, given by repeating the flag or separating entries with commas.
//
//	--listen   ip:port                        AddrPorts
//	--upstream ip:port, or ip for port 53     Upstreams
//	--allow    CIDR, or an address alone      Prefixes
package netflag

import (
	"fmt"
	"net/netip"
	"strings"
)

// AddrPorts is a list of ip:port, e.g. --listen 127.0.0.1:53.
type AddrPorts []netip.AddrPort

// Upstreams is a list of DNS servers: ip:port, or ip alone for port 53,
// e.g. --upstream 192.0.2.53 --upstream [2001:db8::53]:5353.
type Upstreams []netip.AddrPort

// Prefixes is a list of networks: a CIDR prefix (kept masked), or an
// address alone for just that address, e.g. --allow 10.89.0.0/24,192.0.2.7.
type Prefixes []netip.Prefix

func (l *AddrPorts) String() string { return join(*l) }
func (l *Upstreams) String() string { return join(*l) }
func (l *Prefixes) String() string  { return join(*l) }

func (l *AddrPorts) Set(v string) error {
	return each(v, func(s string) error {
		a, err := netip.ParseAddrPort(s)
		if err != nil {
			return fmt.Errorf("%q is not ip:port", s)
		}
		*l = append(*l, a)
		return nil
	})
}

func (l *Upstreams) Set(v string) error {
	return each(v, func(s string) error {
		if a, err := netip.ParseAddrPort(s); err == nil {
			*l = append(*l, a)
			return nil
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("%q is neither ip nor ip:port", s)
		}
		*l = append(*l, netip.AddrPortFrom(a, 53))
		return nil
	})
}

func (l *Prefixes) Set(v string) error {
	return each(v, func(s string) error {
		if p, err := netip.ParsePrefix(s); err == nil {
			*l = append(*l, p.Masked())
			return nil
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("%q is neither a CIDR prefix nor an address", s)
		}
		*l = append(*l, netip.PrefixFrom(a, a.BitLen()))
		return nil
	})
}

// each calls set for every comma-separated entry of v, spaces trimmed.
func each(v string, set func(string) error) error {
	for part := range strings.SplitSeq(v, ",") {
		if err := set(strings.TrimSpace(part)); err != nil {
			return err
		}
	}
	return nil
}

func join[T fmt.Stringer](l []T) string {
	s := make([]string, len(l))
	for i, x := range l {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}
