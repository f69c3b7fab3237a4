package resolver

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
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
func PodmanDNSGuard(dirs ...string) func(netip.AddrPort) error {
	if len(dirs) == 0 {
		dirs = podmanNetworkDirs
	}
	return func(addr netip.AddrPort) error {
		if addr.Port() != 53 {
			return nil
		}
		for _, dir := range dirs {
			files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					continue
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
