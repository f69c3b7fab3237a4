package memory

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Options configures a Runtime. The zero value is ready to use.
type Options struct {
	// HealthDelay is how long after its start a container with a
	// healthcheck reports healthy; until then it reports starting. Zero:
	// healthy at once.
	HealthDelay time.Duration
	// Now is the runtime's clock, for StartedAt, FinishedAt and health.
	// Nil: time.Now.
	Now func() time.Time
	// ImageEnv is environment an image adds to every container made from
	// it, as a real image's ENV lines do. Inspect reports it merged under
	// the declared env.
	ImageEnv map[string]map[string]string
	// RuntimeLabels are labels the runtime adds to every container, as
	// podman adds an image's labels. Inspect and List report them.
	RuntimeLabels map[string]string
}

// Runtime is an in-memory reconcile.Runtime. It is safe for concurrent use.
type Runtime struct {
	opts Options

	// mu guards the fields below.
	mu         sync.Mutex
	containers map[string]*container // by ID
	names      map[string]string     // name -> ID
	volumes    map[string]bool       // named volumes ever mounted; never removed
	unhealthy  map[string]bool       // names whose containers report unhealthy
	nextID     uint64
	clock      uint64 // logical clock: ticks on every start and stop
	calls      map[string]int
	faults     []*fault
	before     func(call Call) error
	watch      func(call Call, now []Container)
	crashed    error         // when set, every call fails with it
	pending    *pendingFault // After fault of the call in progress
	stops      []Stop
	events     []Event
	// held are the host ports and static addresses of running
	// containers, to the ID of the one holding each (see claims).
	held map[claim]string
}

type container struct {
	// What List reads first and together (and settings.Name next), so
	// that listing 10,000 containers reads few cache lines of each.
	id        string
	labels    map[string]string
	state     reconcile.State
	startedAt time.Time
	settings  spec.Rendered // as created; immutable except Resources and Name
	finished  time.Time
	startSeq  uint64 // logical time of the last start; 0: never started
}

// New returns an empty Runtime.
func New(opts Options) *Runtime {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Runtime{
		opts:       opts,
		containers: map[string]*container{},
		names:      map[string]string{},
		volumes:    map[string]bool{},
		unhealthy:  map[string]bool{},
		calls:      map[string]int{},
		held:       map[claim]string{},
	}
}

var _ reconcile.Runtime = (*Runtime)(nil)

// List implements reconcile.Runtime. The returned label maps are shared
// with the runtime and must not be modified.
func (m *Runtime) List(ctx context.Context) ([]reconcile.Observed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.watched(Call{Method: "List"})
	if err := m.enter(ctx, Call{Method: "List"}); err != nil {
		return nil, err
	}
	out := make([]reconcile.Observed, 0, len(m.containers))
	for _, c := range m.containers {
		out = append(out, m.observed(c))
	}
	return out, m.leave(Call{Method: "List"})
}

// Inspect implements reconcile.Runtime.
func (m *Runtime) Inspect(ctx context.Context, id string) (reconcile.Inspected, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	call := Call{Method: "Inspect", ID: id}
	defer m.watched(call)
	c, err := m.lookup(ctx, call)
	if err != nil {
		return reconcile.Inspected{}, err
	}
	settings := c.settings
	if env := m.opts.ImageEnv[settings.Image]; len(env) > 0 {
		merged := maps.Clone(env)
		maps.Copy(merged, settings.Env)
		settings.Env = merged
	}
	settings.Labels = maps.Clone(c.labels)
	return reconcile.Inspected{
		Observed:   m.observed(c),
		Settings:   settings,
		Health:     m.health(c),
		FinishedAt: c.finished,
	}, m.leave(call)
}

// Create implements reconcile.Runtime.
func (m *Runtime) Create(ctx context.Context, r spec.Rendered) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	call := Call{Method: "Create", Name: r.Name}
	defer m.watched(call)
	if err := m.enter(ctx, call); err != nil {
		return "", err
	}
	if r.Name == "" {
		return "", fmt.Errorf("creating container: no name")
	}
	if _, taken := m.names[r.Name]; taken {
		return "", fmt.Errorf("creating %q: %w", r.Name, reconcile.ErrNameInUse)
	}
	m.nextID++
	id := fmt.Sprintf("%064x", m.nextID)
	labels := maps.Clone(m.opts.RuntimeLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, r.Labels)
	settings := deepCopy(r)
	c := &container{id: id, settings: settings, labels: labels, state: reconcile.StateCreated}
	m.containers[id] = c
	m.names[r.Name] = id
	for _, mt := range r.Mounts {
		if mt.Type == spec.MountVolume {
			m.volumes[mt.Source] = true
		}
	}
	m.log(call.withID(id))
	return id, m.leave(call)
}

// Start implements reconcile.Runtime.
func (m *Runtime) Start(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	call := Call{Method: "Start", ID: id}
	defer m.watched(call)
	c, err := m.lookup(ctx, call)
	if err != nil {
		return err
	}
	if c.state != reconcile.StateRunning {
		if err := m.holdLocked(c); err != nil {
			return fmt.Errorf("starting %q: %w", c.settings.Name, err)
		}
		m.clock++
		c.state = reconcile.StateRunning
		c.startSeq = m.clock
		c.startedAt = m.opts.Now()
		c.finished = time.Time{}
		m.log(call.withName(c.settings.Name))
	}
	return m.leave(call)
}

// Stop implements reconcile.Runtime. It records the container's own stop
// signal and the timeout given, whatever the container's state.
func (m *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	call := Call{Method: "Stop", ID: id}
	defer m.watched(call)
	c, err := m.lookup(ctx, call)
	if err != nil {
		return err
	}
	if c.state == reconcile.StateRunning {
		m.releaseLocked(c)
		m.clock++
		c.state = reconcile.StateExited
		c.finished = m.opts.Now()
		m.stops = append(m.stops, Stop{ID: id, Name: c.settings.Name, Signal: c.settings.StopSignal, Timeout: timeout})
		m.log(call.withName(c.settings.Name))
	}
	return m.leave(call)
}

// Rename implements reconcile.Runtime.
func (m *Runtime) Rename(ctx context.Context, id, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	call := Call{Method: "Rename", ID: id, Name: name}
	defer m.watched(call)
	c, err := m.lookup(ctx, call)
	if err != nil {
		return err
	}
	if other, taken := m.names[name]; taken && other != id {
		return fmt.Errorf("renaming %q to %q: %w", c.settings.Name, name, reconcile.ErrNameInUse)
	}
	delete(m.names, c.settings.Name)
	c.settings.Name = name
	m.names[name] = id
	m.log(call)
	return m.leave(call)
}

// Remove implements reconcile.Runtime. Like podman without --force, it
// refuses a running container. Volumes always stay. A Remove cut short
// (Fault.Cut) leaves the container in reconcile.StateRemoving, as podman
// does: then every call but List and another Remove fails on it.
func (m *Runtime) Remove(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	call := Call{Method: "Remove", ID: id}
	defer m.watched(call)
	c, err := m.lookup(ctx, call)
	if err != nil {
		return err
	}
	if c.state == reconcile.StateRunning {
		return fmt.Errorf("removing %q: container is running; stop it first", c.settings.Name)
	}
	if m.pending != nil && m.pending.cut {
		c.state = reconcile.StateRemoving // not removed: no event
		return m.leave(call)
	}
	delete(m.containers, id)
	delete(m.names, c.settings.Name)
	m.log(call.withName(c.settings.Name))
	return m.leave(call)
}

// Update implements reconcile.Runtime: it changes resources only.
func (m *Runtime) Update(ctx context.Context, id string, res spec.Resources) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	call := Call{Method: "Update", ID: id}
	defer m.watched(call)
	c, err := m.lookup(ctx, call)
	if err != nil {
		return err
	}
	c.settings.Resources = res
	m.log(call.withName(c.settings.Name))
	return m.leave(call)
}

// lookup enters call and finds its container. mu must be held.
func (m *Runtime) lookup(ctx context.Context, call Call) (*container, error) {
	if err := m.enter(ctx, call); err != nil {
		return nil, err
	}
	c, ok := m.containers[call.ID]
	if !ok {
		return nil, fmt.Errorf("%s %s: %w", strings.ToLower(call.Method), call.ID, reconcile.ErrNotFound)
	}
	if c.state == reconcile.StateRemoving && call.Method != "Remove" {
		// As podman answers: its removal began, nothing else is possible.
		return nil, fmt.Errorf("%s %s: %w", strings.ToLower(call.Method), call.ID, ErrBeingRemoved)
	}
	return c, nil
}

func (m *Runtime) observed(c *container) reconcile.Observed {
	return reconcile.Observed{
		ID:        c.id,
		Name:      c.settings.Name,
		Image:     c.settings.Image,
		Labels:    c.labels,
		State:     c.state,
		StartedAt: c.startedAt,
	}
}

// health judges c now. mu must be held.
func (m *Runtime) health(c *container) reconcile.Health {
	switch {
	case c.settings.Healthcheck == nil:
		return reconcile.HealthNone
	case c.state != reconcile.StateRunning:
		return reconcile.HealthStarting
	case m.unhealthy[c.settings.Name]:
		return reconcile.HealthUnhealthy
	case m.opts.Now().Sub(c.startedAt) < m.opts.HealthDelay:
		return reconcile.HealthStarting
	}
	return reconcile.HealthHealthy
}

func deepCopy(r spec.Rendered) spec.Rendered {
	out := r
	out.Labels = maps.Clone(r.Labels)
	out.Env = maps.Clone(r.Env)
	if r.Healthcheck != nil {
		h := *r.Healthcheck
		out.Healthcheck = &h
	}
	return out
}
