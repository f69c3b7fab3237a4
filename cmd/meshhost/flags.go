package main

import (
	"flag"
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

// parseInterspersed parses flags wherever they stand among the positional
// arguments (`meshhost roster diff 6 7 --state DIR`), which Go's flag
// package stops at, and returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if rest[0] == "--" {
			return append(positional, rest[1:]...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
