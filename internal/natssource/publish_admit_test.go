package natssource

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/agent/declsource"

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

// TestWatchSameGenerationRewrite: a rewrite of the declaration generation in
// force with other content (written past PublishDeclaration) is refused by
// a running watcher visibly (counted stale), and by a restarted one's Put,
// so no machine takes it.
func TestWatchSameGenerationRewrite(t *testing.T) {
	url := sharedURL(t)
	l := testLayout(t, url)
	p := newPublisher(t, url, l)
	ctx := context.Background()
	publishRoster(t, p, 1, roster(3))
	decl := func(image string) *spec.Declaration {
		return &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff,
			Roster:     &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
			Containers: []spec.Container{{Name: "app", Image: image}}}
	}
	if _, err := p.PublishDeclaration(ctx, decl("busybox:1")); err != nil {
		t.Fatal(err)
	}
	src := declsource.New(declsource.Config{Machine: "ace", Registerer: prometheus.NewRegistry()})
	reg := prometheus.NewRegistry()
	startWatcher(t, Config{Server: Server{URL: url}, Layout: l, Machine: "ace", Sink: src, Registerer: reg})
	waitFor(t, 20*time.Second, "declaration 7 in force", func() bool { d, _ := src.Current(); return d != nil && d.Generation == 7 })

	kv, err := p.js.KeyValue(ctx, l.Machines)
	if err != nil {
		t.Fatal(err)
	}
	other := decl("busybox:2")
	other.Roster = nil
	full, err := other.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(full, &top); err != nil {
		t.Fatal(err)
	}
	delete(top, "roster") // as PublishDeclaration writes it
	data, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "ace", data); err != nil {
		t.Fatal(err)
	}
	stale := func() float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "meshhost_natssource_declarations_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetValue() == "stale" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	waitFor(t, 20*time.Second, "the rewrite counted stale", func() bool { return stale() == 1 })
	if d, _ := src.Current(); d.Containers[0].Image != "busybox:1" {
		t.Errorf("running watcher: image %q in force, want busybox:1", d.Containers[0].Image)
	}

	// A restarted watcher reads the rewrite first; its Put refuses it.
	src2 := declsource.New(declsource.Config{Machine: "ace", Registerer: prometheus.NewRegistry()})
	if err := src2.Put(decl("busybox:1"), "before restart"); err != nil {
		t.Fatal(err)
	}
	startWatcher(t, Config{Server: Server{URL: url}, Layout: l, Machine: "ace", Sink: src2, Registerer: prometheus.NewRegistry()})
	time.Sleep(time.Second) // nothing to wait for: the refusal changes nothing
	if d, _ := src2.Current(); d.Containers[0].Image != "busybox:1" {
		t.Errorf("restarted watcher: image %q in force, want busybox:1", d.Containers[0].Image)
	}
}
