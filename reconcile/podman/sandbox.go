package podman

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/containers/podman/v5/pkg/bindings/containers"
)

// Sandbox is a running container as seen from the host: its init process,
// whose /proc/PID/ns/net and /proc/PID/root are the container's network
// namespace and file system, and its address on each network.
type Sandbox struct {
	ID, Name string
	PID      int
	// Networks are the networks it is attached to, by name, with its
	// IPv4 address there (invalid when it has none).
	Networks map[string]netip.Addr
}

// NetworkNames returns the networks of s, sorted.
func (s Sandbox) NetworkNames() []string {
	out := make([]string, 0, len(s.Networks))
	for n := range s.Networks {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Sandbox returns container nameOrID's sandbox; an error when it does not
// run (a stopped container has no network namespace to look from).
func (r *Runtime) Sandbox(ctx context.Context, nameOrID string) (Sandbox, error) {
	data, err := containers.Inspect(r.call(ctx, "Inspect"), nameOrID, nil)
	if err != nil {
		return Sandbox{}, fmt.Errorf("inspecting container %s: %w", nameOrID, mapError(err))
	}
	if data.State == nil || !data.State.Running || data.State.Pid <= 0 {
		return Sandbox{}, fmt.Errorf("container %s does not run: it has no network to look from", nameOrID)
	}
	s := Sandbox{ID: data.ID, Name: data.Name, PID: data.State.Pid, Networks: map[string]netip.Addr{}}
	if data.NetworkSettings != nil {
		for name, n := range data.NetworkSettings.Networks {
			a, _ := netip.ParseAddr(n.IPAddress)
			s.Networks[name] = a
		}
	}
	return s, nil
}
