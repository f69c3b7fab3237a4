package netflag

import (
	"fmt"
	"net"
	"net/netip"
)

// Loopback is the rule of an address flag whose endpoint is for the
// machine itself (metrics, health): its address must be on loopback
// ("localhost" or a loopback IP) unless the operator gives RemoteFlag to
// mean another. The agent's --http and the resolver's --http share it.
type Loopback struct {
	Flag       string // e.g. "--http"
	RemoteFlag string // e.g. "--http-remote"
	Serves     string // what the endpoint serves, e.g. "metrics and health"
	Example    string // a loopback value, e.g. "127.0.0.1:9469"
}

// Check returns an error unless addr (host:port) is on loopback or remote
// is set. The error starts with addr, not the flag: the caller names the
// flag or the configuration key the value came from.
func (l Loopback) Check(addr string, remote bool) error {
	if remote {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want ip:port, e.g. %s: %w", addr, l.Example, err)
	}
	if host == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s: not a loopback address; %s would be served to other machines: give %s to mean it, or %s %s", addr, l.Serves, l.RemoteFlag, l.Flag, l.Example)
}
