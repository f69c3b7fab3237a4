package reconcile_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// BenchmarkPlan10000 plans a machine of 10,000 containers (in memory) of
// which one changed: the cost is one List and one record comparison per
// container. cpu-ms/op is the process's CPU (the collector's included),
// which a machine busy with other work stretches less than ns/op.
func BenchmarkPlan10000(b *testing.B) {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	r := newReconciler(b, rt, nil)
	cs := make([]spec.Container, 10000)
	for i := range cs {
		cs[i] = spec.Container{
			Name: fmt.Sprintf("svc-%05d", i), Image: "registry.internal/svc:1",
			Env:      map[string]string{"PORT": "8080", "LOG": "info"},
			Ports:    []spec.Port{{HostPort: uint16(10000 + i%50000), ContainerPort: 8080}},
			Mounts:   []spec.Mount{{Type: spec.MountVolume, Source: fmt.Sprintf("data-%d", i), Target: "/data"}},
			Networks: []spec.NetworkAttachment{{Name: "mesh"}},
		}
	}
	desired := renderAll(b, cs, nil, resolveMode)
	mustReconcile(b, r, desired)
	desired[4242].Image = "registry.internal/svc:2"
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuNow(b)
	for b.Loop() {
		p, err := r.Plan(ctx, desired)
		if err != nil {
			b.Fatal(err)
		}
		if n := p.Count(reconcile.Replace); n != 1 {
			b.Fatalf("plan replaces %d, want 1", n)
		}
	}
	b.ReportMetric(float64((cpuNow(b)-c0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// cpuNow returns the CPU time the process has used.
func cpuNow(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
