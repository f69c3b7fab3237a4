package memory

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Stop is one stop of a running container: which signal the runtime sent
// (the container's own) and how long it was told to wait before SIGKILL.
type Stop struct {
	ID, Name string
	Signal   string
	Timeout  time.Duration
}

// Event is one change the runtime made, at a logical time.
type Event struct {
	Seq    uint64 // the logical clock after the change; starts and stops tick it
	Method string // "Create", "Start", "Stop", "Rename", "Remove", "Update"
	ID     string
	Name   string // the container's name (Rename: the new name)
}

// Container is a snapshot of one container, for tests.
type Container struct {
	ID       string
	Name     string
	Settings spec.Rendered // as created, with Update's resources
	Labels   map[string]string
	State    reconcile.State
	Health   reconcile.Health
	StartSeq uint64 // logical time of its last start; 0: never started
}

// log records an event. mu must be held.
func (m *Runtime) log(c Call) {
	m.events = append(m.events, Event{Seq: m.clock, Method: c.Method, ID: c.ID, Name: c.Name})
}

// Stops returns every stop so far, oldest first.
func (m *Runtime) Stops() []Stop {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.stops)
}

// Events returns every change so far, oldest first.
func (m *Runtime) Events() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events)
}

// Container returns the container named name.
func (m *Runtime) Container(name string) (Container, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.names[name]
	if !ok {
		return Container{}, false
	}
	return m.snapshot(m.containers[id]), true
}

// Containers returns every container, by name.
func (m *Runtime) Containers() []Container {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Container, 0, len(m.containers))
	for _, c := range m.containers {
		out = append(out, m.snapshot(c))
	}
	slices.SortFunc(out, func(a, b Container) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (m *Runtime) snapshot(c *container) Container {
	return Container{
		ID: c.id, Name: c.settings.Name, Settings: deepCopy(c.settings), Labels: maps.Clone(c.labels),
		State: c.state, Health: m.health(c), StartSeq: c.startSeq,
	}
}

// SetUnhealthy makes whatever container holds name report unhealthy (or
// no longer), as a failing healthcheck would; it applies to containers
// created under the name later too.
func (m *Runtime) SetUnhealthy(name string, unhealthy bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if unhealthy {
		m.unhealthy[name] = true
	} else {
		delete(m.unhealthy, name)
	}
}

// Volumes returns every named volume any container ever mounted. Volumes
// outlive their containers, as in podman.
func (m *Runtime) Volumes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.volumes))
}

// Exited marks a running container as having exited by itself, as a
// crashed process does.
func (m *Runtime) Exited(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.names[name]
	if !ok {
		return fmt.Errorf("container %q: %w", name, reconcile.ErrNotFound)
	}
	c := m.containers[id]
	if c.state == reconcile.StateRunning {
		m.releaseLocked(c)
	}
	c.state = reconcile.StateExited
	c.finished = m.opts.Now()
	return nil
}
