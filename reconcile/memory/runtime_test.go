package memory_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

func TestRuntime(t *testing.T) {
	ctx := context.Background()
	m := memory.New(memory.Options{})
	r := spec.Rendered{Container: spec.Container{Name: "db", Image: "pg", StopSignal: "SIGINT", StopTimeout: time.Minute,
		Mounts: []spec.Mount{{Type: spec.MountVolume, Source: "pgdata", Target: "/d"}}}}
	id, err := m.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, r); !errors.Is(err, reconcile.ErrNameInUse) {
		t.Errorf("Create(same name) = %v, want ErrNameInUse", err)
	}
	m.Start(ctx, id)
	if err := m.Remove(ctx, id); err == nil {
		t.Error("Remove(running) = nil, want an error")
	}
	m.Stop(ctx, id, 90*time.Second)
	if got := m.Stops(); len(got) != 1 || got[0].Signal != "SIGINT" || got[0].Timeout != 90*time.Second {
		t.Errorf("Stops() = %+v", got)
	}
	if err := m.Rename(ctx, id, "db.old"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Inspect(ctx, id); !errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("Inspect(removed) = %v, want ErrNotFound", err)
	}
	if v := m.Volumes(); len(v) != 1 || v[0] != "pgdata" {
		t.Errorf("Volumes() = %v, want pgdata kept", v)
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	m := memory.New(memory.Options{})
	m.Inject(memory.Fault{Method: "Create", N: 2, After: true, Crash: true})
	if _, err := m.Create(ctx, spec.Rendered{Container: spec.Container{Name: "a"}}); err != nil {
		t.Fatalf("first Create: %v", err)
	}
	if _, err := m.Create(ctx, spec.Rendered{Container: spec.Container{Name: "b"}}); !errors.Is(err, memory.ErrInjected) {
		t.Fatalf("second Create = %v, want ErrInjected", err)
	}
	if _, ok := m.Container("b"); !ok {
		t.Error("an After fault: the call did not take effect")
	}
	if _, err := m.List(ctx); !errors.Is(err, memory.ErrInjected) {
		t.Errorf("List after a crash = %v, want ErrInjected", err)
	}
	m.Recover()
	if _, err := m.List(ctx); err != nil {
		t.Errorf("List after Recover = %v", err)
	}
	if got := m.CallCounts(); got["Create"] != 2 || got["List"] != 2 {
		t.Errorf("CallCounts() = %v", got)
	}
}

// TestWatch: the hook sees every call, failed ones included, with the
// containers as the call left them.
func TestWatch(t *testing.T) {
	ctx := context.Background()
	m := memory.New(memory.Options{})
	type seen struct {
		method string
		state  reconcile.State
	}
	var got []seen
	m.Watch(func(c memory.Call, now []memory.Container) {
		s := seen{method: c.Method}
		if len(now) == 1 {
			s.state = now[0].State
		}
		got = append(got, s)
	})
	id, err := m.Create(ctx, spec.Rendered{Container: spec.Container{Name: "a", Image: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	m.Inject(memory.Fault{Method: "Start", After: true})
	if err := m.Start(ctx, id); !errors.Is(err, memory.ErrInjected) {
		t.Fatalf("Start with an After fault = %v, want ErrInjected", err)
	}
	m.Inject(memory.Fault{Method: "Stop"})
	if err := m.Stop(ctx, id, time.Second); !errors.Is(err, memory.ErrInjected) {
		t.Fatalf("Stop with a fault = %v, want ErrInjected", err)
	}
	m.Watch(nil)
	m.List(ctx)
	want := []seen{{"Create", reconcile.StateCreated}, {"Start", reconcile.StateRunning}, {"Stop", reconcile.StateRunning}}
	if len(got) != len(want) {
		t.Fatalf("watched %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: watched %v, want %v", i, got[i], want[i])
		}
	}
}

// TestRemovalCutShort: a Remove cut short leaves the container being
// removed, as podman does when its API service dies in the middle of one:
// listed, refused by every call but Remove, which finishes it.
func TestRemovalCutShort(t *testing.T) {
	ctx := context.Background()
	m := memory.New(memory.Options{})
	id, err := m.Create(ctx, spec.Rendered{Container: spec.Container{Name: "db", Image: "pg"}})
	if err != nil {
		t.Fatal(err)
	}
	m.Inject(memory.Fault{Method: "Remove", Cut: true, Crash: true})
	if err := m.Remove(ctx, id); !errors.Is(err, memory.ErrInjected) {
		t.Fatalf("Remove cut short = %v, want ErrInjected", err)
	}
	if _, err := m.List(ctx); err == nil {
		t.Error("List after a crash = nil error, want the crash's")
	}
	m.Recover()
	list, err := m.List(ctx)
	if err != nil || len(list) != 1 || list[0].State != reconcile.StateRemoving {
		t.Fatalf("List = %+v, %v; want db being removed", list, err)
	}
	for name, call := range map[string]func() error{
		"Start":   func() error { return m.Start(ctx, id) },
		"Stop":    func() error { return m.Stop(ctx, id, time.Second) },
		"Rename":  func() error { return m.Rename(ctx, id, "db2") },
		"Update":  func() error { return m.Update(ctx, id, spec.Resources{}) },
		"Inspect": func() error { _, err := m.Inspect(ctx, id); return err },
	} {
		if err := call(); !errors.Is(err, memory.ErrBeingRemoved) {
			t.Errorf("%s on a container being removed = %v, want ErrBeingRemoved", name, err)
		}
	}
	if err := m.Remove(ctx, id); err != nil {
		t.Fatalf("Remove of a container being removed = %v", err)
	}
	if list, _ := m.List(ctx); len(list) != 0 {
		t.Errorf("List after the removal = %+v, want nothing", list)
	}
	defer func() {
		if recover() == nil {
			t.Error("Inject(a Start cut short) did not panic: only a Remove can be cut")
		}
	}()
	m.Inject(memory.Fault{Method: "Start", Cut: true})
}

// TestHeldAtStart: as podman, a container cannot start while another
// running container holds one of its host ports (address, port and
// protocol) or static addresses (on the same network); it can once that
// one stopped or exited. Creating it is never refused.
func TestHeldAtStart(t *testing.T) {
	web := func(name string) spec.Container {
		return spec.Container{Name: name, Image: "caddy",
			Ports:    []spec.Port{{HostPort: 8080, ContainerPort: 80}},
			Networks: []spec.NetworkAttachment{{Name: "mesh", IPv4: netip.MustParseAddr("10.89.0.5")}}}
	}
	for _, tc := range []struct {
		name     string
		second   func(c *spec.Container)
		want     string // in the second Start's error; "" starts
		andAfter func(m *memory.Runtime, ctx context.Context, first string) error
	}{
		{"same host port", func(c *spec.Container) { c.Networks = nil }, "8080: bind: address already in use", nil},
		{"same static address", func(c *spec.Container) { c.Ports = nil }, "requested ip address 10.89.0.5 is already allocated", nil},
		{"same port, other protocol; other network", func(c *spec.Container) {
			c.Ports[0].Protocol = "udp"
			c.Networks[0].Name = "other"
		}, "", nil},
		{"other host port; other address", func(c *spec.Container) {
			c.Ports[0].HostPort = 8081
			c.Networks[0].IPv4 = netip.MustParseAddr("10.89.0.6")
		}, "", nil},
		{"the first stopped", func(*spec.Container) {}, "", func(m *memory.Runtime, ctx context.Context, first string) error {
			return m.Stop(ctx, first, time.Second)
		}},
		{"the first exited", func(*spec.Container) {}, "", func(m *memory.Runtime, ctx context.Context, first string) error {
			return m.Exited("a")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := memory.New(memory.Options{})
			first, err := m.Create(ctx, spec.Rendered{Container: web("a")})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(ctx, first); err != nil {
				t.Fatal(err)
			}
			c := web("b")
			tc.second(&c)
			second, err := m.Create(ctx, spec.Rendered{Container: c})
			if err != nil {
				t.Fatalf("Create = %v, want the container created", err)
			}
			if tc.andAfter != nil {
				if err := tc.andAfter(m, ctx, first); err != nil {
					t.Fatal(err)
				}
			}
			err = m.Start(ctx, second)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Start(b) = %v, want it started", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Start(b) = %v, want an error containing %q", err, tc.want)
			}
			if got, _ := m.Container("b"); (got.State == reconcile.StateRunning) != (tc.want == "") {
				t.Errorf("b is %s after Start", got.State)
			}
		})
	}
}
