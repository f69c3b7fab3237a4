// Command meshprobe is the reachability probe meshhost runs in a short-lived
// container on each runtime network. It resolves names with Go's own
// resolver configured by the container's /etc/resolv.conf, exactly as a
// resolve-mode container on that network would, and prints one JSON line:
//
//	{"pass":true,"checks":[{"check":"canary","name":"...","want":"240.1.2.3","got":["240.1.2.3"],"ok":true,"latency_ms":1.2}],...}
//
// It exits 0 when every check passed, 1 when one failed and 2 on bad flags.
// It needs no capabilities, no shell and no base image: meshhost imports
// it alone into a local image (`podman import`), built with CGO_ENABLED=0.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

// check is one name to resolve and what must come back.
type check struct {
	Check string `json:"check"` // "canary", "outside" or "peer"
	Name  string `json:"name"`
	// Want is the address the answer must contain; "any" accepts any
	// address, "self" one of the container's own.
	Want      string   `json:"want"`
	Got       []string `json:"got,omitempty"`
	OK        bool     `json:"ok"`
	Error     string   `json:"error,omitempty"`
	LatencyMS float64  `json:"latency_ms"`
}

// result is the line meshprobe prints.
type result struct {
	Pass       bool     `json:"pass"`
	Checks     []*check `json:"checks"`
	ResolvConf string   `json:"resolv_conf"`
	Addrs      []string `json:"addrs,omitempty"` // the container's own addresses
}

func main() {
	var (
		canary      = flag.String("canary", "", "canary `name` only meshhost's resolver answers")
		canaryWant  = flag.String("canary-want", "", "the `address` the canary must resolve to")
		outside     = flag.String("outside", "", "a `name` outside the mesh, resolved through the resolver's forwarding")
		outsideWant = flag.String("outside-want", "any", "the `address` the outside name must resolve to, or any")
		peer        = flag.String("peer", "", "a container `name` on the same network (aardvark-dns), as a container would ask for it")
		peerWant    = flag.String("peer-want", "self", "the `address` the peer must resolve to, or self (the probe's own addresses) or any")
		timeout     = flag.Duration("timeout", 4*time.Second, "bound on each lookup")
	)
	flag.Parse()
	if *canary == "" || *canaryWant == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: meshprobe -canary NAME -canary-want ADDR [-outside NAME [-outside-want ADDR|any]] [-peer NAME [-peer-want ADDR|self|any]]")
		os.Exit(2)
	}
	*timeout = min(max(*timeout, 100*time.Millisecond), 30*time.Second)

	res := result{Pass: true}
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		res.ResolvConf = string(b)
	}
	self := ownAddrs()
	for _, a := range self {
		res.Addrs = append(res.Addrs, a.String())
	}
	checks := []*check{{Check: "canary", Name: *canary, Want: *canaryWant}}
	if *outside != "" {
		checks = append(checks, &check{Check: "outside", Name: *outside, Want: *outsideWant})
	}
	if *peer != "" {
		checks = append(checks, &check{Check: "peer", Name: *peer, Want: *peerWant})
	}
	r := &net.Resolver{PreferGo: true}
	for _, c := range checks {
		run(r, c, self, *timeout)
		res.Checks = append(res.Checks, c)
		res.Pass = res.Pass && c.OK
	}
	json.NewEncoder(os.Stdout).Encode(res)
	if !res.Pass {
		os.Exit(1)
	}
}

// run resolves c.Name and judges the answer: IPv4 only (the canary and
// the stub's outside name are A records), except a peer's name, which on
// an IPv6-only network has AAAA records only.
func run(r *net.Resolver, c *check, self []netip.Addr, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	network := "ip4"
	if c.Check == "peer" {
		network = "ip"
	}
	start := time.Now()
	addrs, err := r.LookupNetIP(ctx, network, c.Name)
	c.LatencyMS = float64(time.Since(start).Microseconds()) / 1000
	for _, a := range addrs {
		c.Got = append(c.Got, a.Unmap().String())
	}
	if err != nil {
		c.Error = err.Error()
		return
	}
	switch c.Want {
	case "any":
		c.OK = len(addrs) > 0
	case "self":
		c.OK = slices.ContainsFunc(addrs, func(a netip.Addr) bool { return slices.Contains(self, a.Unmap()) })
	default:
		want, perr := netip.ParseAddr(c.Want)
		if perr != nil {
			c.Error = fmt.Sprintf("want %q is not an address", c.Want)
			return
		}
		c.OK = slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Unmap() == want.Unmap() })
	}
	if !c.OK {
		c.Error = fmt.Sprintf("got %s, want %s", strings.Join(c.Got, ","), c.Want)
	}
}

// ownAddrs returns the container's addresses, loopback excluded.
func ownAddrs() []netip.Addr {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ia := range ifaddrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil && !p.Addr().IsLoopback() {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}
