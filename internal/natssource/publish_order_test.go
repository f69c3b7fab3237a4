package natssource

import (
	"context"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestPublishDeclarationContainerOrder: the same declaration with its
// containers in another order is the same declaration, as the agent's push
// judges it (containers are named; admit.Contents): publishing it again
// is idempotent, not generation_reused.
func TestPublishDeclarationContainerOrder(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	ctx := context.Background()
	decl := func(names ...string) *spec.Declaration {
		d := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff,
			Roster: &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}}}
		for _, n := range names {
			d.Containers = append(d.Containers, spec.Container{Name: n, Image: "busybox:1"})
		}
		return d
	}
	rev, err := p.PublishDeclaration(ctx, decl("app", "db"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.PublishDeclaration(ctx, decl("db", "app")); err != nil || again != rev {
		t.Errorf("PublishDeclaration(the containers in another order) = %d, %v, want %d, nil (the same declaration)", again, err, rev)
	}
}
