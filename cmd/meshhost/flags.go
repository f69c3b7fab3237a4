package main

import (
	"fmt"
	"net/netip"
	"strings"
)

// addrList is a repeatable (or comma-separated) ip:port flag.
type addrList []netip.AddrPort

func (l *addrList) String() string {
	s := make([]string, len(*l))
	for i, a := range *l {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func (l *addrList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		ap, err := netip.ParseAddrPort(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not ip:port", part)
		}
		*l = append(*l, ap)
	}
	return nil
}

// prefixList is a repeatable (or comma-separated) CIDR flag.
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l *prefixList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not a CIDR prefix", part)
		}
		*l = append(*l, p.Masked())
	}
	return nil
}
