package podman

import (
	"context"

	"github.com/meshhost/meshhost/migrations"
)

// This file is what the migrations need of podman besides the probe's
// one-shot containers and image (probe.go): the runtime's networks in the
// migrations' terms (Network is migrations.Network), a version for the
// probe's report, and the probe containers a killed agent left behind.
// With it, Runtime is the migrations' runtime as it is the reconciler's.

var (
	_ migrations.Runtime      = (*Runtime)(nil)
	_ migrations.ImageRuntime = (*Runtime)(nil)
	_ migrations.ImagePruner  = (*Runtime)(nil)
)

// RuntimeVersion names the runtime and its version, e.g. "podman 4.3.1".
func (r *Runtime) RuntimeVersion(ctx context.Context) (string, error) {
	v, err := r.Version(ctx)
	if err != nil {
		return "", err
	}
	return "podman " + v.Version, nil
}

// ProbeContainers lists the containers labelled migrations.LabelProbe, in
// any state.
func (r *Runtime) ProbeContainers(ctx context.Context) ([]migrations.ProbeContainer, error) {
	list, err := r.ListLabelled(ctx, migrations.LabelProbe)
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
func (r *Runtime) RemoveProbeContainer(ctx context.Context, id string) error {
	return r.RemoveOneShot(ctx, id)
}
