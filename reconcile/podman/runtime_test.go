package podman

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

func TestErrorsMapToReconcileSentinels(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	missing := h.Name("missing")
	for _, tc := range []struct {
		op  string
		err func() error
	}{
		{"Inspect", func() error { _, err := rt.Inspect(ctx(t), missing); return err }},
		{"Start", func() error { return rt.Start(ctx(t), missing) }},
		{"Stop", func() error { return rt.Stop(ctx(t), missing, time.Second) }},
		{"Rename", func() error { return rt.Rename(ctx(t), missing, h.Name("other")) }},
		{"Remove", func() error { return rt.Remove(ctx(t), missing) }},
		{"Update", func() error { return rt.Update(ctx(t), missing, spec.Resources{PidsLimit: 10}) }},
	} {
		if err := tc.err(); !errors.Is(err, reconcile.ErrNotFound) {
			t.Errorf("%s(missing container) = %v, want ErrNotFound", tc.op, err)
		}
	}

	a := render(t, h, sleeper("a"), testRoster(t), spec.Mode{Names: spec.Copy})
	b := render(t, h, sleeper("b"), testRoster(t), spec.Mode{Names: spec.Copy})
	idA := createStarted(t, rt, a)
	idB, err := rt.Create(ctx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Create(ctx(t), a); !errors.Is(err, reconcile.ErrNameInUse) {
		t.Errorf("Create(a name in use) = %v, want ErrNameInUse", err)
	}
	if err := rt.Rename(ctx(t), idB, a.Name); !errors.Is(err, reconcile.ErrNameInUse) {
		t.Errorf("Rename(to a name in use) = %v, want ErrNameInUse", err)
	}
	if err := rt.Start(ctx(t), idA); err != nil {
		t.Errorf("Start(running container) = %v, want nil", err)
	}
	if err := rt.Stop(ctx(t), idB, time.Second); err != nil {
		t.Errorf("Stop(never started container) = %v, want nil", err)
	}
	err = rt.Remove(ctx(t), idA)
	if err == nil || errors.Is(err, reconcile.ErrNotFound) {
		t.Errorf("Remove(running container) = %v, want an error other than ErrNotFound", err)
	}
	if _, err := rt.Inspect(ctx(t), idA); err != nil {
		t.Errorf("after a refused Remove, Inspect = %v; want the container still there", err)
	}
	if err := rt.Rename(ctx(t), idB, h.Name("b2")); err != nil {
		t.Fatal(err)
	}
	if in, err := rt.Inspect(ctx(t), idB); err != nil || in.Name != h.Name("b2") {
		t.Errorf("after Rename, Inspect = %q, %v; want name %s", in.Name, err, h.Name("b2"))
	}
	if err := rt.Remove(ctx(t), idB); err != nil {
		t.Errorf("Remove(created container) = %v", err)
	}
	if err := rt.Stop(ctx(t), idA, 0); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctx(t), idA, 0); err != nil {
		t.Errorf("Stop(stopped container) = %v, want nil", err)
	}
	if err := rt.Remove(ctx(t), idA); err != nil {
		t.Errorf("Remove(stopped container) = %v", err)
	}
	calls := rt.Calls()
	if calls["Create"] != 3 || calls["Remove"] != 4 || calls["Inspect"] != 3 {
		t.Errorf("Calls() = %v; want Create 3, Remove 4, Inspect 3", calls)
	}
}

// TestStopUsesTheContainersOwnSignal: a container that exits cleanly on
// SIGUSR1 only is stopped by Stop within its timeout, by that signal; one
// that ignores its signal is killed when the timeout passes.
func TestStopUsesTheContainersOwnSignal(t *testing.T) {
	rt, h := newRuntime(t)
	clean := sleeper("clean")
	clean.Command = []string{"sh", "-c", `trap 'echo stopped by USR1; exit 0' USR1; echo ready; while :; do sleep 0.1; done`}
	clean.StopSignal = "SIGUSR1"
	clean.StopTimeout = 60 * time.Second
	stubborn := sleeper("stubborn")
	stubborn.Command = []string{"sh", "-c", `trap '' TERM INT; echo ready; while :; do sleep 0.1; done`}
	stubborn.StopTimeout = 2 * time.Second

	for _, tc := range []struct {
		c        spec.Container
		log      string
		min, max time.Duration
		exitCode string
	}{
		// Within its 60 s timeout, well before it ends (the bound stays
		// under 60 s): SIGUSR1 ends it, exit 0.
		{clean, "stopped by USR1", 0, 45 * time.Second, "0"},
		// It ignores SIGTERM: killed after its 2 s (the lower bound), exit 137.
		{stubborn, "", 2 * time.Second, 30 * time.Second, "137"},
	} {
		t.Run(tc.c.Name, func(t *testing.T) {
			r := render(t, h, tc.c, testRoster(t), spec.Mode{Names: spec.Copy})
			id := createStarted(t, rt, r)
			waitForLog(t, h.Podman, id, "ready")
			start := time.Now()
			if err := rt.Stop(ctx(t), id, r.StopTimeout); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took < tc.min || took > tc.max {
				t.Errorf("Stop took %v, want between %v and %v", took, tc.min, tc.max)
			}
			if logs, _ := h.Podman("logs", id); !strings.Contains(logs, tc.log) {
				t.Errorf("logs = %q, want %q", logs, tc.log)
			}
			if code := h.MustPodman("inspect", "--format", "{{.State.ExitCode}}", id); code != tc.exitCode {
				t.Errorf("exit code %s, want %s", code, tc.exitCode)
			}
			in, err := rt.Inspect(ctx(t), id)
			if err != nil {
				t.Fatal(err)
			}
			if in.State != reconcile.StateExited || in.FinishedAt.Before(in.StartedAt) {
				t.Errorf("after Stop: state %q, started %v, finished %v; want exited after it started", in.State, in.StartedAt, in.FinishedAt)
			}
		})
	}
}

func waitForLog(t *testing.T, podman func(...string) (string, error), id, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if logs, _ := podman("logs", id); strings.Contains(logs, want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container %s never logged %q", id, want)
}

// TestRemoveKeepsVolumes: what a container wrote to its named volume is
// still there for the container that replaces it.
func TestRemoveKeepsVolumes(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	c := sleeper("db")
	c.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: h.Name("pgdata"), Target: "/data"}}
	r := render(t, h, c, testRoster(t), spec.Mode{Names: spec.Copy})
	id := createStarted(t, rt, r)
	h.Exec(id, "sh", "-c", "echo precious > /data/f")
	if err := rt.Stop(ctx(t), id, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Podman("volume", "exists", h.Name("pgdata")); err != nil {
		t.Fatalf("after Remove, the volume is gone: %v", err)
	}
	id = createStarted(t, rt, r)
	if got := h.Exec(id, "cat", "/data/f"); got != "precious\n" {
		t.Errorf("the replacement reads %q from the volume, want %q", got, "precious\n")
	}
}

// TestUpdateChangesResourcesInPlace: the container keeps its ID and keeps
// running with the new limits (read from its cgroup); zero lifts a limit.
//
// Podman before 5.1 applies an update to the running container only: Inspect
// keeps reporting the create-time limits and the next start restores them
// (podman PR 22322 made updates persistent). The test pins that, so that an
// upgrade which changes it shows up here.
func TestUpdateChangesResourcesInPlace(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t)
	v, err := rt.Version(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	persistent := !strings.HasPrefix(v.Version, "4.") && !strings.HasPrefix(v.Version, "5.0.")
	c := sleeper("svc")
	created := spec.Resources{MemoryBytes: 64 << 20, MilliCPUs: 500, PidsLimit: 100}
	c.Resources = created
	id := createStarted(t, rt, render(t, h, c, testRoster(t), spec.Mode{Names: spec.Copy}))
	if got := cgroupLimits(t, h, id); got != created {
		t.Fatalf("the container's cgroup limits %+v, want %+v as created", got, created)
	}
	var last spec.Resources
	for _, res := range []spec.Resources{
		{MemoryBytes: 256 << 20, MilliCPUs: 1500, PidsLimit: 200},
		{MemoryBytes: 32 << 20, MilliCPUs: 250, PidsLimit: 50},
		{},
		{PidsLimit: 64},
	} {
		if err := rt.Update(ctx(t), id, res); err != nil {
			t.Fatalf("Update(%+v) = %v", res, err)
		}
		if got := cgroupLimits(t, h, id); got != res {
			t.Errorf("after Update(%+v), the container's cgroup limits are %+v", res, got)
		}
		in, err := rt.Inspect(ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != reconcile.StateRunning || in.ID != id {
			t.Errorf("after Update(%+v): state %s, id %s; want running, %s", res, in.State, in.ID, id)
		}
		if want := map[bool]spec.Resources{true: res, false: created}[persistent]; in.Settings.Resources != want {
			t.Errorf("podman %s: after Update(%+v), Inspect reports %+v, want %+v", v.Version, res, in.Settings.Resources, want)
		}
		last = res
	}
	if err := rt.Stop(ctx(t), id, 0); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	want := map[bool]spec.Resources{true: last, false: created}[persistent]
	if got := cgroupLimits(t, h, id); got != want {
		t.Errorf("podman %s: after a restart the limits are %+v, want %+v", v.Version, got, want)
	}
}

// cgroupLimits reads a running container's limits from inside it (cgroup v1,
// as on this VM, or v2).
func cgroupLimits(t testing.TB, h *podmantest.Harness, id string) spec.Resources {
	t.Helper()
	out := h.Exec(id, "sh", "-c", `
if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
  cat /sys/fs/cgroup/memory/memory.limit_in_bytes
  echo "$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
  cat /sys/fs/cgroup/pids/pids.max
else
  cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max /sys/fs/cgroup/pids.max
fi`)
	f := strings.Split(strings.TrimSpace(out), "\n")
	if len(f) != 3 {
		t.Fatalf("reading cgroup limits: %q", out)
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n >= 1<<62 { // "max", -1, or v1's page-rounded MaxInt64
			return 0
		}
		return n
	}
	var r spec.Resources
	r.MemoryBytes = num(f[0])
	quota, period, _ := strings.Cut(f[1], " ")
	if q, p := num(quota), num(period); q > 0 && p > 0 {
		r.MilliCPUs = q * 1000 / p
	}
	r.PidsLimit = num(f[2])
	return r
}

func TestVersion(t *testing.T) {
	t.Parallel()
	rt, _ := newRuntime(t)
	v, err := rt.Version(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if v.Version == "" || v.APIVersion == "" || !strings.HasPrefix(v.OsArch, "linux/") {
		t.Errorf("Version() = %+v; want a version, an API version and linux", v)
	}
	t.Logf("podman service: %+v", v)
}

// TestHealthchecksRunOnInspect: without systemd podman never runs a
// healthcheck by itself; RunHealthchecks makes Inspect run it, and the health
// follows podman's rules (unhealthy after Retries failures in a row).
func TestHealthchecksRunOnInspect(t *testing.T) {
	t.Parallel()
	rt, h := newRuntime(t, RunHealthchecks())
	plain, _ := New(ctx(t), h.Socket(), nil)
	for _, tc := range []struct {
		name string
		test []string
		want []reconcile.Health // after each Inspect
	}{
		{"passing", []string{"true"}, []reconcile.Health{reconcile.HealthHealthy, reconcile.HealthHealthy}},
		{"failing", []string{"false"}, []reconcile.Health{reconcile.HealthStarting, reconcile.HealthUnhealthy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sleeper(tc.name)
			c.Healthcheck = &spec.Healthcheck{Test: tc.test, Interval: time.Hour, Retries: 2}
			id := createStarted(t, rt, render(t, h, c, testRoster(t), spec.Mode{Names: spec.Copy}))
			if in, err := plain.Inspect(ctx(t), id); err != nil || in.Health != reconcile.HealthStarting {
				t.Errorf("Inspect without RunHealthchecks: health %q, %v; want %q", in.Health, err, reconcile.HealthStarting)
			}
			for i, want := range tc.want {
				in, err := rt.Inspect(ctx(t), id)
				if err != nil {
					t.Fatal(err)
				}
				if in.Health != want {
					t.Errorf("Inspect #%d: health %q, want %q", i+1, in.Health, want)
				}
			}
		})
	}
}

// BenchmarkContainerLifecycle is one container's create, start, stop and
// remove through the adapter, each reported on its own.
func BenchmarkContainerLifecycle(b *testing.B) {
	rt, h := newRuntime(b)
	var create, start, stop, remove time.Duration
	i := 0
	for b.Loop() {
		i++
		r := render(b, h, sleeper(strconv.Itoa(i)), nil, resolveMode)
		t0 := time.Now()
		id, err := rt.Create(ctx(b), r)
		t1 := time.Now()
		if err == nil {
			err = rt.Start(ctx(b), id)
		}
		t2 := time.Now()
		if err == nil {
			err = rt.Stop(ctx(b), id, 10*time.Second)
		}
		t3 := time.Now()
		if err == nil {
			err = rt.Remove(ctx(b), id)
		}
		if err != nil {
			b.Fatal(err)
		}
		create, start, stop, remove = create+t1.Sub(t0), start+t2.Sub(t1), stop+t3.Sub(t2), remove+time.Since(t3)
	}
	for name, d := range map[string]time.Duration{"create": create, "start": start, "stop": stop, "remove": remove} {
		b.ReportMetric(float64(d.Milliseconds())/float64(b.N), name+"-ms/op")
	}
}
