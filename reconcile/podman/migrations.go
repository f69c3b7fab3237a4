// Package podmannet gives the migration gate the podman runtime in its own
// terms: networks and version as package migrations defines them, so that
// migrations never imports the podman bindings (only reconcile/podman does).
package podmannet

import (
	"context"

	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile/podman"
)

// Runtime is reconcile/podman's Runtime, with Networks and Version in
// migrations' terms; it satisfies migrations.Runtime.
type Runtime struct{ *podman.Runtime }

var _ migrations.Runtime = Runtime{}

// reconcile/podman's Runtime prunes probe images itself.
var _ migrations.ImagePruner = (*podman.Runtime)(nil)

// Networks returns the runtime's networks as migrations.Network values.
func (p Runtime) Networks(ctx context.Context) ([]migrations.Network, error) {
	nets, err := p.Runtime.Networks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]migrations.Network, 0, len(nets))
	for _, n := range nets {
		m := migrations.Network{Name: n.Name, Driver: n.Driver, DNSEnabled: n.DNSEnabled, Internal: n.Internal}
		for _, s := range n.Subnets {
			m.Subnets = append(m.Subnets, migrations.Subnet{Prefix: s.Prefix, Gateway: s.Gateway})
		}
		out = append(out, m)
	}
	return out, nil
}

// Version names the runtime and its version, e.g. "podman 4.3.1".
func (p Runtime) Version(ctx context.Context) (string, error) {
	v, err := p.Runtime.Version(ctx)
	if err != nil {
		return "", err
	}
	return "podman " + v.Version, nil
}

// ProbeContainers lists the containers labelled migrations.LabelProbe, in
// any state.
func (p Runtime) ProbeContainers(ctx context.Context) ([]migrations.ProbeContainer, error) {
	list, err := p.Runtime.ListLabelled(ctx, migrations.LabelProbe)
	if err != nil {
		return nil, err
	}
	out := make([]migrations.ProbeContainer, 0, len(list))
	for _, c := range list {
		out = append(out, migrations.ProbeContainer{ID: c.ID, Name: c.Name, Labels: c.Labels, State: string(c.State), Created: c.Created})
	}
	return out, nil
}

// RemoveProbeContainer removes a probe container by force, with its
// anonymous volumes.
func (p Runtime) RemoveProbeContainer(ctx context.Context, id string) error {
	return p.Runtime.RemoveOneShot(ctx, id)
}
