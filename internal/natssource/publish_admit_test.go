package natssource

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestPublishDeclarationGenerationReused: publishing the generation in the
// bucket again with the same content is idempotent (same revision), with
// other content it fails (generation_reused) and writes nothing.
func TestPublishDeclarationGenerationReused(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	ctx := context.Background()
	decl := func(image string) *spec.Declaration {
		return &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff,
			Roster:     &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
			Containers: []spec.Container{{Name: "app", Image: image}}}
	}
	rev, err := p.PublishDeclaration(ctx, decl("busybox:1"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.PublishDeclaration(ctx, decl("busybox:1")); err != nil || again != rev {
		t.Errorf("PublishDeclaration(same again) = %d, %v, want %d, nil", again, err, rev)
	}
	if got, err := p.PublishDeclaration(ctx, decl("busybox:2")); !errors.Is(err, ErrStale) {
		t.Errorf("PublishDeclaration(same generation, other image) = %d, %v, want ErrStale (generation_reused)", got, err)
	}
}
