package resolver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// podmanNetworkDirs are where rootful podman (netavark) keeps its network
// definitions.
var podmanNetworkDirs = []string{"/etc/containers/networks", "/run/containers/networks"}

// PodmanDNSGuard returns a Config.Forbidden check that refuses port 53 on the
// gateway of every DNS-enabled podman network defined in dirs (default:
// rootful podman's /etc/containers/networks and /run/containers/networks):
// aardvark-dns serves those, and sharing its socket would silently steal its
// queries. The definitions are read at each call, so networks created later
// are seen.
//
// A directory or definition that exists but cannot be read (the resolver
// runs as a user of its own, and podman's directories are 0755 and its
// files 0644 unless someone made them otherwise) refuses port 53 on every
// address but loopback's (aardvark-dns serves only gateways): the check
// never passes for what it could not see.
func PodmanDNSGuard(dirs ...string) func(netip.AddrPort) error {
	if len(dirs) == 0 {
		dirs = podmanNetworkDirs
	}
	return func(addr netip.AddrPort) error {
		if addr.Port() != 53 {
			return nil
		}
		blind := func(path string, err error) error {
			if addr.Addr().IsLoopback() {
				return nil
			}
			return fmt.Errorf("cannot read podman's network definitions (%v), so cannot tell whether aardvark-dns serves port 53 of %s; let the resolver's user read %s (podman makes it readable to all), or use another port", err, addr.Addr(), path)
		}
		for _, dir := range dirs {
			entries, err := os.ReadDir(dir)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return blind(dir, err)
			}
			for _, e := range entries {
				if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
					continue
				}
				f := filepath.Join(dir, e.Name())
				data, err := os.ReadFile(f)
				if errors.Is(err, fs.ErrNotExist) {
					continue // removed since the directory was read
				}
				if err != nil {
					return blind(f, err)
				}
				var n struct {
					Name       string `json:"name"`
					DNSEnabled bool   `json:"dns_enabled"`
					Subnets    []struct {
						Gateway string `json:"gateway"`
					} `json:"subnets"`
				}
				if json.Unmarshal(data, &n) != nil || !n.DNSEnabled {
					continue
				}
				for _, sn := range n.Subnets {
					if gw, err := netip.ParseAddr(sn.Gateway); err == nil && gw.Unmap() == addr.Addr() {
						return fmt.Errorf("%s is the gateway of podman network %q, where aardvark-dns serves port 53; use another port or address (or set dns_enabled=false on that network)", addr.Addr(), n.Name)
					}
				}
			}
		}
		return nil
	}
}
