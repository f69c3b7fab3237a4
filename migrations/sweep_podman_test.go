//go:build remote

package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile/podman"
	"github.com/meshhost/meshhost/spec"
)

func hexNonce(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestRunnerSweepsLeftoverProbesPodman: before each probe round a Runner
// removes, by force, the probe containers of its owner left behind (here
// made by hand, as an agent killed mid-probe leaves them: running sleep),
// and nothing else: a container without the probe label right next to it,
// and another owner's probe container, stay as they were. The round's own
// probe containers are gone after it.
func TestRunnerSweepsLeftoverProbesPodman(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := podman.New(ctx, h.Socket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt := p
	owner := strings.TrimSuffix(h.Prefix(), "-")
	// left starts a container with labels (and the harness's, for the
	// cleanup) running sleep, and returns its ID.
	left := func(name string, labels ...string) string {
		args := []string{"run", "-d", "--name", name, "--label", podmantest.Label + "=" + h.Prefix()}
		for _, l := range labels {
			args = append(args, "--label", l)
		}
		return h.MustPodman(append(args, podmantest.Image, "sleep", "600")...)
	}
	neighbour := h.Name("neighbour")
	other := "meshhost-probe-" + hexNonce(8)
	keep := map[string]string{
		neighbour: left(neighbour),
		other:     left(other, migrations.LabelProbe+"="+hexNonce(8), migrations.LabelProbeOwner+"=another-"+owner),
	}

	nets, err := rt.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(nets, func(n migrations.Network) bool { return n.Name == spec.DefaultNetwork })
	if i < 0 {
		t.Fatalf("no %s network", spec.DefaultNetwork)
	}
	// The probe image is busybox without the probe binary, and nothing
	// listens: each round fails fast, which is all the sweep needs.
	r, err := migrations.NewRunner(migrations.RunnerConfig{
		Runtime: rt, Resolver: deaf{}, Image: podmantest.Image, Zone: zone, Outside: outsideName,
		NodeLocal: netip.MustParseAddr("169.254.53.99"), Owner: owner, Timeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ours := func() []string {
		list, err := rt.ProbeContainers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list {
			if c.Labels[migrations.LabelProbeOwner] == owner {
				out = append(out, c.Name)
			}
		}
		return out
	}
	for round := range 2 {
		leftover := "meshhost-probe-" + hexNonce(8)
		left(leftover, migrations.LabelProbe+"="+hexNonce(8), migrations.LabelProbeOwner+"="+owner)
		res := r.Probe(ctx, nets[i:i+1], nil)
		t.Logf("round %d: pass=%v reason=%s", round+1, res[0].Pass, res[0].Reason)
		if got := ours(); len(got) != 0 {
			t.Errorf("round %d: probe containers of %s left: %v, want the leftover %s swept and none of the round's", round+1, owner, got, leftover)
		}
		for name, id := range keep {
			out, err := h.Podman("inspect", "--format", "{{.Id}} {{.State.Status}}", name)
			if err != nil || out != id+" running" {
				t.Errorf("round %d: %s: %q, %v; want it untouched (%.12s running)", round+1, name, out, err, id)
			}
		}
	}
}

// TestPruneProbeImagesPodman: the probe image of an older meshprobe binary
// (localhost/meshhost-probe:<16 hex digits>, not the current one) is
// removed; the current one, other tags of that repository and images of
// other repositories stay.
func TestPruneProbeImagesPodman(t *testing.T) {
	h := podmantest.New(t)
	podmantest.Exclusive(t) // no other test's probe image is in use meanwhile
	ctx := context.Background()
	p, err := podman.New(ctx, h.Socket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := p.ImageTags(ctx, migrations.ProbeImageRepo)
	if err != nil {
		t.Fatal(err)
	}
	current := migrations.ProbeImageRepo + ":" + hexNonce(8)
	old := migrations.ProbeImageRepo + ":" + hexNonce(8)
	other := []string{migrations.ProbeImageRepo + ":" + h.Prefix() + "x", "localhost/" + h.Prefix() + "meshhost-probe:" + hexNonce(8)}
	// Tags of the test image: removing a tag only untags it.
	made := append([]string{current, old}, other...)
	for _, ref := range made {
		h.MustPodman("tag", podmantest.Image, ref)
	}
	t.Cleanup(func() {
		if out, err := h.Podman(append([]string{"rmi", "--ignore"}, made...)...); err != nil {
			t.Errorf("removing the test's tags: %v: %s", err, out)
		}
	})
	// Probe images this test did not make (another agent's, on a machine
	// shared with the tests) are hidden from the prune, so it runs in every
	// case and removes nothing of theirs.
	removed, err := migrations.PruneProbeImages(ctx, hiding{p, before}, current, nil)
	if err != nil || !slices.Equal(removed, []string{old}) {
		t.Errorf("PruneProbeImages = %v, %v; want only %s removed", removed, err, old)
	}
	for _, ref := range append([]string{current, podmantest.Image}, other...) {
		if ok, err := p.ImageExists(ctx, ref); err != nil || !ok {
			t.Errorf("%s: exists %v, %v; want it kept", ref, ok, err)
		}
	}
	if ok, _ := p.ImageExists(ctx, old); ok {
		t.Errorf("%s is still there", old)
	}
}

// hiding is the real podman adapter with some images' names left out of
// ImageTags.
type hiding struct {
	*podman.Runtime
	hidden []string
}

func (h hiding) ImageTags(ctx context.Context, repo string) ([]string, error) {
	tags, err := h.Runtime.ImageTags(ctx, repo)
	return slices.DeleteFunc(tags, func(tag string) bool { return slices.Contains(h.hidden, tag) }), err
}
