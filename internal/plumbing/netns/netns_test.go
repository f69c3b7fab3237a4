//go:build linux

package netns

import (
	"context"
	"errors"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"testing"
)

// TestJoinOwn: joining this process's own namespace runs what it is given
// there (root only: setns needs CAP_SYS_ADMIN), and Do after Close fails.
func TestJoinOwn(t *testing.T) {
	needs.Root(t, "setns")
	ns, err := Join("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := ns.Do(context.Background(), func() { ran = true }); err != nil || !ran {
		t.Fatalf("Do = %v, ran %v", err, ran)
	}
	ns.Close()
	if err := ns.Do(context.Background(), func() {}); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	if _, err := Join("/nonexistent/ns/net"); err == nil {
		t.Error("Join of a missing path succeeded")
	}
}
