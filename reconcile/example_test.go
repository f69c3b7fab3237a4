package reconcile_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

func Example() {
	ctx := context.Background()
	rt := memory.New(memory.Options{})
	r, err := reconcile.New(reconcile.Config{Runtime: rt, Budget: reconcile.Budget{Max: 3, Window: time.Minute}})
	if err != nil {
		panic(err)
	}
	mode := spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}}}
	declare := func(image string) []spec.Rendered {
		db := spec.Container{Name: "db", Image: "postgres:16", StopSignal: "SIGINT", StopTimeout: 2 * time.Minute}
		app := spec.Container{Name: "app", Image: image, DependsOn: []string{"db"}}
		var out []spec.Rendered
		for _, c := range []spec.Container{db, app} {
			rc, err := spec.Render(c, nil, mode)
			if err != nil {
				panic(err)
			}
			out = append(out, rc)
		}
		return out
	}

	for _, image := range []string{"app:1", "app:2"} {
		plan, err := r.Plan(ctx, declare(image))
		if err != nil {
			panic(err)
		}
		fmt.Print(plan)
		if _, err := r.Apply(ctx, plan); err != nil {
			panic(err)
		}
	}
	// Output:
	// create "db": not present
	// create "app": not present
	// replace "app": image: app:1 -> app:2
}
