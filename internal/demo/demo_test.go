package demo

import (
	"context"
	"errors"
	"testing"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// TestRunReportsFailedPasses: when the passes of several machines fail at
// once (here every machine's List fails on the deploy's first pass), Run
// returns the first error. A failed pass has no Result; reading it for the
// machines after the first one panicked.
func TestRunReportsFailedPasses(t *testing.T) {
	for _, method := range []string{"List", "Create"} {
		t.Run(method, func(t *testing.T) {
			opts := Options{Simulated: true, NewRuntime: func(string, spec.NameMode) (reconcile.Runtime, func(), error) {
				rt := memory.New(memory.Options{})
				n := 1
				if method == "List" {
					n = 2 // the first List counts the containers before the pass
				}
				rt.Inject(memory.Fault{Method: method, N: n})
				return rt, func() {}, nil
			}}
			rows, err := Run(context.Background(), opts)
			if !errors.Is(err, memory.ErrInjected) {
				t.Fatalf("Run with every machine's %s failing = %d rows, %v; want the injected error", method, len(rows), err)
			}
		})
	}
}
