package podman

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/containers/podman/v5/pkg/bindings/network"
	"github.com/containers/podman/v5/pkg/bindings/system"

	"github.com/meshhost/meshhost/migrations"
)

// Network is one runtime network as the migration and the reachability
// probe need it: the migrations' own type, so Runtime is their runtime.
type Network = migrations.Network

// Subnet is one subnet of a Network.
type Subnet = migrations.Subnet

// Networks lists the runtime's networks, sorted by name.
func (r *Runtime) Networks(ctx context.Context) ([]Network, error) {
	list, err := network.List(r.call(ctx, "Networks"), nil)
	if err != nil {
		return nil, fmt.Errorf("listing networks: %w", err)
	}
	out := make([]Network, 0, len(list))
	for _, n := range list {
		nw := Network{
			Name: n.Name, Driver: n.Driver, Interface: n.NetworkInterface,
			DNSEnabled: n.DNSEnabled, Internal: n.Internal, IPv6: n.IPv6Enabled,
		}
		for _, s := range n.Subnets {
			var sub Subnet
			if s.Subnet.IP != nil {
				ones, _ := s.Subnet.Mask.Size()
				if a, ok := netip.AddrFromSlice(s.Subnet.IP); ok {
					sub.Prefix = netip.PrefixFrom(a.Unmap(), ones)
				}
			}
			if a, ok := netip.AddrFromSlice(s.Gateway); ok {
				sub.Gateway = a.Unmap()
			}
			nw.Subnets = append(nw.Subnets, sub)
		}
		out = append(out, nw)
	}
	slices.SortFunc(out, func(a, b Network) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Version is what the podman service says it is.
type Version struct {
	Version    string // e.g. "4.3.1"
	APIVersion string // the libpod API version, e.g. "4.3.1"
	GoVersion  string
	OsArch     string // e.g. "linux/amd64"
}

// Version returns the podman service's version.
func (r *Runtime) Version(ctx context.Context) (Version, error) {
	rep, err := system.Version(r.call(ctx, "Version"), nil)
	if err != nil {
		return Version{}, fmt.Errorf("asking podman its version: %w", err)
	}
	if rep.Server == nil {
		return Version{}, fmt.Errorf("asking podman its version: the service did not say")
	}
	s := rep.Server
	return Version{Version: s.Version, APIVersion: s.APIVersion, GoVersion: s.GoVersion, OsArch: s.OsArch}, nil
}

// KeepsUpdates reports whether this podman keeps a resource update (Update)
// across the container's restarts, so that the reconciler may update in
// place: 5.1 and later (podman PR 22322). Before, Inspect keeps reporting
// the limits the container was created with and its next start restores
// them, so a resource change must replace the container
// (reconcile.Config.NoInPlaceUpdates). A version this package cannot read
// is taken as not keeping them.
func (r *Runtime) KeepsUpdates(ctx context.Context) (bool, error) {
	v, err := r.Version(ctx)
	if err != nil {
		return false, err
	}
	var major, minor int
	if _, err := fmt.Sscanf(v.Version, "%d.%d", &major, &minor); err != nil {
		return false, nil
	}
	return major > 5 || major == 5 && minor >= 1, nil
}
