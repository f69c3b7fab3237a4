package podman

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Runtime is a reconcile.Runtime over one podman API service. It is safe
// for concurrent use.
type Runtime struct {
	conn   context.Context // carries the bindings' connection; values only
	logger *slog.Logger
	health bool // run healthchecks on Inspect

	// mu guards calls.
	mu    sync.Mutex
	calls map[string]int64
}

var _ reconcile.Runtime = (*Runtime)(nil)

// Option configures a Runtime.
type Option func(*Runtime)

// RunHealthchecks makes Inspect run the healthcheck of a running container
// that has one (podman healthcheck run) and inspect it again, reporting the
// health that results: three API calls instead of one. Podman schedules
// healthchecks with systemd timers; on a machine without systemd they never
// run by themselves and the health stays "starting" for ever.
func RunHealthchecks() Option { return func(r *Runtime) { r.health = true } }

// New connects to the podman API service at socketURI, e.g.
// "unix:///run/podman/podman.sock", and checks that it answers. A nil logger
// discards.
func New(ctx context.Context, socketURI string, logger *slog.Logger, opts ...Option) (*Runtime, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := bindings.NewConnection(ctx, socketURI)
	if err != nil {
		return nil, fmt.Errorf("connecting to podman at %s: %w", socketURI, err)
	}
	r := &Runtime{
		conn:   context.WithoutCancel(conn),
		logger: logger.With("component", "podman"),
		calls:  map[string]int64{},
	}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Calls returns how many API calls each method has made so far, by method
// name ("List", "Inspect", "Healthcheck", ...).
func (r *Runtime) Calls() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.calls)
}

// call returns a context for one API call of method: the caller's deadline
// and cancellation, the connection's values.
func (r *Runtime) call(ctx context.Context, method string) context.Context {
	r.mu.Lock()
	r.calls[method]++
	r.mu.Unlock()
	return callContext{ctx, r.conn}
}

// callContext is ctx with the bindings' connection values added: the
// bindings find their client in the context, and the caller's context has
// none.
type callContext struct {
	context.Context
	conn context.Context
}

func (c callContext) Value(key any) any {
	if v := c.conn.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// List returns every container podman has, running or not, in one call.
func (r *Runtime) List(ctx context.Context) ([]reconcile.Observed, error) {
	list, err := containers.List(r.call(ctx, "List"), new(containers.ListOptions).WithAll(true))
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", mapError(err))
	}
	out := make([]reconcile.Observed, 0, len(list))
	for _, c := range list {
		o := reconcile.Observed{
			ID:     c.ID,
			Image:  c.Image,
			Labels: c.Labels,
			State:  state(c.State),
		}
		if len(c.Names) > 0 {
			o.Name = c.Names[0]
		}
		if c.StartedAt > 0 {
			o.StartedAt = time.Unix(c.StartedAt, 0) // whole seconds: podman's List says no more
		}
		out = append(out, o)
	}
	return out, nil
}

// Inspect returns one container's settings as podman reports them, and its
// health.
func (r *Runtime) Inspect(ctx context.Context, id string) (reconcile.Inspected, error) {
	data, err := containers.Inspect(r.call(ctx, "Inspect"), id, nil)
	if err != nil {
		return reconcile.Inspected{}, fmt.Errorf("inspecting container %s: %w", id, mapError(err))
	}
	in := inspected(data)
	if r.health && in.Settings.Healthcheck != nil && in.State == reconcile.StateRunning {
		// The answer of a run is that run's result only; the container's
		// health (failing streak against retries, start period) is in its
		// state afterwards.
		if _, err := containers.RunHealthCheck(r.call(ctx, "Healthcheck"), id, nil); err != nil {
			return reconcile.Inspected{}, fmt.Errorf("running the healthcheck of container %s: %w", id, mapError(err))
		}
		data, err := containers.Inspect(r.call(ctx, "Inspect"), id, nil)
		if err != nil {
			return reconcile.Inspected{}, fmt.Errorf("inspecting container %s: %w", id, mapError(err))
		}
		in = inspected(data)
	}
	return in, nil
}

// Create creates, without starting, a container with exactly the settings
// of rendered. It never pulls an image.
func (r *Runtime) Create(ctx context.Context, rendered spec.Rendered) (string, error) {
	s, err := specGenerator(rendered)
	if err != nil {
		return "", fmt.Errorf("creating container %s: %w", rendered.Name, err)
	}
	resp, err := containers.CreateWithSpec(r.call(ctx, "Create"), s, nil)
	if err != nil {
		return "", fmt.Errorf("creating container %s: %w", rendered.Name, mapError(err))
	}
	for _, w := range resp.Warnings {
		r.logger.Warn("podman warned at create", "container", rendered.Name, "warning", w)
	}
	return resp.ID, nil
}

// Start starts a created or stopped container; starting a running one is
// not an error.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if err := containers.Start(r.call(ctx, "Start"), id, nil); err != nil {
		return fmt.Errorf("starting container %s: %w", id, mapError(err))
	}
	return nil
}

// Stop stops a running container with its own stop signal (podman sends the
// container's signal when none is given), then SIGKILL after timeout,
// rounded up to whole seconds. Stopping a stopped container is not an error.
// The call blocks until the container has stopped.
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	secs := uint((max(timeout, 0) + time.Second - 1) / time.Second)
	if err := containers.Stop(r.call(ctx, "Stop"), id, new(containers.StopOptions).WithTimeout(secs)); err != nil {
		return fmt.Errorf("stopping container %s: %w", id, mapError(err))
	}
	return nil
}

// Rename gives a container a new name.
func (r *Runtime) Rename(ctx context.Context, id, name string) error {
	if err := containers.Rename(r.call(ctx, "Rename"), id, new(containers.RenameOptions).WithName(name)); err != nil {
		return fmt.Errorf("renaming container %s to %s: %w", id, name, mapError(err))
	}
	return nil
}

// Remove removes a stopped container, never its volumes and never by force:
// removing a running container is an error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	opts := new(containers.RemoveOptions).WithVolumes(false).WithForce(false)
	reports, err := containers.Remove(r.call(ctx, "Remove"), id, opts)
	if err != nil {
		return fmt.Errorf("removing container %s: %w", id, mapError(err))
	}
	for _, rep := range reports {
		if rep.Err != nil {
			return fmt.Errorf("removing container %s: %w", id, mapError(rep.Err))
		}
	}
	return nil
}

// Update sets the resource limits of a container in place; a zero limit
// lifts the limit. Before podman 5.1 the change lasts until the container
// next starts, and Inspect does not show it (see the package doc).
func (r *Runtime) Update(ctx context.Context, id string, res spec.Resources) error {
	opts := &types.ContainerUpdateOptions{NameOrID: id, Resources: updateResources(res)}
	if _, err := containers.Update(r.call(ctx, "Update"), opts); err != nil {
		return fmt.Errorf("updating the resources of container %s: %w", id, mapError(err))
	}
	return nil
}

// updateResources is res for podman update: unlike at create, where an
// absent limit is no limit, an absent limit leaves the current one, so zero
// is sent as -1 (unlimited).
func updateResources(res spec.Resources) *specs.LinuxResources {
	unlimited := int64(-1)
	mem, swap := unlimited, unlimited
	if res.MemoryBytes > 0 {
		// podman's own choice at create: swap as large as memory.
		mem, swap = res.MemoryBytes, 2*res.MemoryBytes
	}
	period := uint64(cpuPeriod)
	quota := unlimited
	if res.MilliCPUs > 0 {
		quota = res.MilliCPUs * cpuPeriod / 1000
	}
	pids := unlimited
	if res.PidsLimit > 0 {
		pids = res.PidsLimit
	}
	return &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &mem, Swap: &swap},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
		Pids:   &specs.LinuxPids{Limit: pids},
	}
}

// mapError maps podman's answers to reconcile's sentinels, keeping the
// message. Only a missing container is ErrNotFound: a missing image or
// network (HTTP 500 from podman 4.3: "image not known", "network not found")
// is an error of its own. The answers differ by version and by podman's
// database (see errors_test.go for each, as the services said them):
//
//   - a missing container: "no such container" (HTTP 404) everywhere;
//   - a create onto a name in use: "that name is already in use" (HTTP
//     500, from the storage layer) everywhere;
//   - a rename onto a name in use: "container already exists" (HTTP 409)
//     on BoltDB (podman 4, and podman 5 on a database made by podman 4),
//     but on SQLite (podman 5's default) the database's own refusal,
//     "UNIQUE constraint failed: ContainerConfig.Name" (HTTP 500).
func mapError(err error) error {
	var m *errorModel
	if !errors.As(err, &m) {
		return err
	}
	switch {
	case m.Because == "no such container", m.ResponseCode == 404 && strings.Contains(m.Message, "no container with"):
		return fmt.Errorf("%s: %w", m.Message, reconcile.ErrNotFound)
	case m.Because == "that name is already in use", m.Because == "container already exists",
		strings.Contains(m.Message, "is already in use"),
		strings.Contains(m.Message, sqliteNameTaken):
		return fmt.Errorf("%s: %w", m.Message, reconcile.ErrNameInUse)
	}
	return err
}

// sqliteNameTaken is how podman's SQLite database refuses a second
// container of one name.
const sqliteNameTaken = "UNIQUE constraint failed: ContainerConfig.Name"

// errorModel is the error podman's API answers with.
type errorModel = errorhandling.ErrorModel
