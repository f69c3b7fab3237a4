package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// Runtime is what the reconciler needs of a container runtime. The podman
// adapter (reconcile/podman) and the in-memory runtime (reconcile/memory)
// implement it.
//
// Names are unique among a runtime's containers. Create-time settings are
// immutable: only Update changes a created container, and only its
// resources. Its labels are among them: the planner reads a container's
// labels once, and trusts them for as long as its ID lasts. No method
// ever removes a volume.
type Runtime interface {
	// List returns every container the runtime has, managed by meshhost or
	// not, with their labels: one call per pass, however many containers.
	List(ctx context.Context) ([]Observed, error)
	// Inspect returns the create-time settings of one container as the
	// runtime reports them, for adopting containers that carry no (or an
	// unknown) digest label, and its current health.
	Inspect(ctx context.Context, id string) (Inspected, error)
	// Create creates (but does not start) a container with exactly the
	// settings r; r.Labels already carries meshhost's labels. It returns the
	// new container's ID, or ErrNameInUse.
	Create(ctx context.Context, r spec.Rendered) (id string, err error)
	// Start starts a created or stopped container.
	Start(ctx context.Context, id string) error
	// Stop stops a running container with its own stop signal, waiting up to
	// timeout before SIGKILL. Stopping a stopped container is not an error.
	Stop(ctx context.Context, id string, timeout time.Duration) error
	// Rename gives a container a new name (ErrNameInUse if taken).
	Rename(ctx context.Context, id, name string) error
	// Remove removes a stopped container, or finishes the removal of one
	// in StateRemoving. Its named volumes stay.
	Remove(ctx context.Context, id string) error
	// Update changes the resource limits of a container in place.
	Update(ctx context.Context, id string, res spec.Resources) error
}

// Sentinel errors a Runtime returns, so the reconciler can branch on them.
var (
	ErrNotFound  = errors.New("no such container")
	ErrNameInUse = errors.New("container name already in use")
)

// State is a container's lifecycle state.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited" // stopped, or exited by itself
	StatePaused  State = "paused"
	// StateRemoving: the runtime began removing the container and never
	// finished. Podman marks a container so before it deletes its storage,
	// and a removal cut short (its API service killed or restarted in the
	// middle of the call) leaves it so for good: it cannot be started,
	// stopped, renamed or even inspected any more (its storage may be half
	// gone), only removed. The planner finishes the removal of a managed
	// one and touches no other call on it.
	StateRemoving State = "removing"
	StateUnknown  State = "unknown"
)

// Health is a container's healthcheck status.
type Health string

const (
	HealthNone      Health = ""          // no healthcheck
	HealthStarting  Health = "starting"  // not yet judged
	HealthHealthy   Health = "healthy"   // last check passed
	HealthUnhealthy Health = "unhealthy" // retries exhausted
)

// Observed is one container as List reports it.
type Observed struct {
	ID        string
	Name      string
	Image     string
	Labels    map[string]string
	State     State
	StartedAt time.Time // zero if never started
}

// Inspected is one container as Inspect reports it.
type Inspected struct {
	Observed
	// Settings are the create-time settings the runtime reports, mapped to
	// spec's vocabulary. Runtimes add their own defaults (an image's env,
	// the runtime's labels); adoption compares with that in mind.
	Settings spec.Rendered
	// Capabilities is the container's capability bounding set, "CAP_"
	// spelled and sorted; nil when the runtime does not say. A runtime
	// reports Settings.CapAdd and CapDrop against its own default set,
	// which differs between runtimes and versions (podman 5 no longer
	// grants MKNOD, NET_RAW and AUDIT_WRITE), so a declared drop of a
	// capability the runtime does not grant anyway is not reported;
	// adoption judges declared capabilities against this set instead.
	Capabilities []string
	Health       Health
	// StartedAt and FinishedAt come from the runtime's own clock.
	FinishedAt time.Time
}
