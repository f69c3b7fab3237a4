package migrations

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// fakeProbes is a runtime holding containers, for the sweep: it records
// the order of calls, and runs probe containers that print nothing.
type fakeProbes struct {
	mu         sync.Mutex
	containers map[string]ProbeContainer // by ID
	calls      []string
	failRemove map[string]bool
	ran        []spec.Rendered
}

func (f *fakeProbes) Networks(context.Context) ([]Network, error)    { return nil, nil }
func (f *fakeProbes) RuntimeVersion(context.Context) (string, error) { return "fake 1", nil }

func (f *fakeProbes) RunOnce(ctx context.Context, r spec.Rendered) (int, string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "RunOnce "+r.Name)
	f.ran = append(f.ran, r)
	f.mu.Unlock()
	return 1, "", nil
}

func (f *fakeProbes) ProbeContainers(context.Context) ([]ProbeContainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "ProbeContainers")
	var out []ProbeContainer
	for _, c := range f.containers {
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeProbes) RemoveProbeContainer(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "Remove "+f.containers[id].Name)
	if f.failRemove[id] {
		return errors.New("podman says no")
	}
	delete(f.containers, id)
	return nil
}

func (f *fakeProbes) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.containers {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

func TestSweepProbes(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	probe := func(name, owner string, age time.Duration) ProbeContainer {
		l := map[string]string{LabelProbe: "n0nce"}
		if owner != "" {
			l[LabelProbeOwner] = owner
		}
		return ProbeContainer{ID: "id-" + name, Name: name, Labels: l, State: "running", Created: now.Add(-age)}
	}
	f := &fakeProbes{containers: map[string]ProbeContainer{}, failRemove: map[string]bool{"id-stuck": true}}
	for _, c := range []ProbeContainer{
		probe("mine-running", "ace", time.Second),
		probe("mine-old", "ace", time.Hour),
		probe("mine-in-flight", "ace", time.Second),
		probe("stuck", "ace", time.Hour),
		probe("other-machine", "bob", time.Hour),
		probe("unowned-young", "", time.Minute),
		probe("unowned-old", "", 11*time.Minute),
		{ID: "id-app", Name: "app", Labels: map[string]string{"io.meshhost.managed": "true", LabelProbeOwner: "ace"}, Created: now.Add(-time.Hour)},
	} {
		f.containers[c.ID] = c
	}
	var logs bytes.Buffer
	removed, err := sweepProbes(context.Background(), f, "ace", UnownedProbeAge, func(n string) bool { return n == "mine-in-flight" }, now,
		slog.New(slog.NewTextHandler(&logs, nil)))
	slices.Sort(removed)
	if want := []string{"mine-old", "mine-running", "unowned-old"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if want := []string{"app", "mine-in-flight", "other-machine", "stuck", "unowned-young"}; !slices.Equal(f.names(), want) {
		t.Errorf("left %v, want %v", f.names(), want)
	}
	if err == nil || !strings.Contains(err.Error(), "stuck") || !strings.Contains(err.Error(), "podman says no") {
		t.Errorf("error %v, want the failed removal of stuck", err)
	}
	for _, name := range removed {
		if !strings.Contains(logs.String(), "container="+name) {
			t.Errorf("the removal of %s is not logged:\n%s", name, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "killed mid-probe") || !strings.Contains(logs.String(), "older meshhost") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}

	// Without an owner, only unowned probe containers past the age go.
	f.containers["id-unowned-old"] = probe("unowned-old", "", time.Hour)
	removed, _ = sweepProbes(context.Background(), f, "", UnownedProbeAge, nil, now, nil)
	if !slices.Equal(removed, []string{"unowned-old"}) {
		t.Errorf("without an owner removed %v, want [unowned-old]", removed)
	}
}

// TestRunnerSweepsBeforeEachRound: a Runner removes its owner's probe
// containers left behind before each round, labels its own with its owner,
// and a round's own containers are spared by a sweep running meanwhile.
func TestRunnerSweepsBeforeEachRound(t *testing.T) {
	f := &fakeProbes{containers: map[string]ProbeContainer{}}
	left := func(name string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.containers["id-"+name] = ProbeContainer{ID: "id-" + name, Name: name, Labels: map[string]string{LabelProbe: "x", LabelProbeOwner: "ace"}, Created: time.Now()}
	}
	r, err := NewRunner(RunnerConfig{Runtime: f, Resolver: nopResolver{}, Image: "img", Zone: "internal", Outside: "example.org", Owner: "ace"})
	if err != nil {
		t.Fatal(err)
	}
	nets := []Network{{Name: "nodns", Driver: "bridge", Subnets: []Subnet{{Prefix: netip.MustParsePrefix("10.99.0.0/24"), Gateway: netip.MustParseAddr("10.99.0.1")}}}}
	for round := range 2 {
		left("left-behind")
		f.mu.Lock()
		f.calls = nil
		f.mu.Unlock()
		r.Probe(context.Background(), nets, nil)
		if got := f.names(); len(got) != 0 {
			t.Errorf("round %d: left %v, want the leftover swept", round+1, got)
		}
		f.mu.Lock()
		calls := slices.Clone(f.calls)
		f.mu.Unlock()
		if len(calls) < 3 || calls[0] != "ProbeContainers" || calls[1] != "Remove left-behind" || !strings.HasPrefix(calls[2], "RunOnce ") {
			t.Errorf("round %d: calls %v, want the sweep before the probe", round+1, calls)
		}
	}
	for _, ran := range f.ran {
		if ran.Labels[LabelProbeOwner] != "ace" || ran.Labels[LabelProbe] == "" {
			t.Errorf("probe container %s labelled %v, want %s=ace", ran.Name, ran.Labels, LabelProbeOwner)
		}
	}
	// A sweep while a round runs spares that round's container.
	r.mu.Lock()
	r.running["meshhost-probe-inflight"] = true
	r.mu.Unlock()
	left("meshhost-probe-inflight")
	if removed := r.Sweep(context.Background()); len(removed) != 0 {
		t.Errorf("a sweep during a round removed %v", removed)
	}
	if got := f.names(); !slices.Equal(got, []string{"meshhost-probe-inflight"}) {
		t.Errorf("left %v, want the probe in flight", got)
	}
}

type nopResolver struct{}

func (nopResolver) Listen(netip.AddrPort) error                          { return nil }
func (nopResolver) Unlisten(netip.AddrPort) error                        { return nil }
func (nopResolver) SetAllow([]netip.Prefix)                              {}
func (nopResolver) SetLocalForward(netip.Prefix, string, netip.AddrPort) {}

// fakeImages holds image names for PruneProbeImages.
type fakeImages struct {
	tags   map[string]bool
	inUse  map[string]bool
	listed string
}

func (f *fakeImages) ImageTags(_ context.Context, repo string) ([]string, error) {
	f.listed = repo
	var out []string
	for tag := range f.tags {
		if strings.HasPrefix(tag, repo+":") {
			out = append(out, tag)
		}
	}
	return out, nil
}

func (f *fakeImages) RemoveImage(_ context.Context, ref string) error {
	if f.inUse[ref] {
		return errors.New("image is in use by a container")
	}
	delete(f.tags, ref)
	return nil
}

func TestPruneProbeImages(t *testing.T) {
	cur := ProbeImageRepo + ":0123456789abcdef"
	f := &fakeImages{tags: map[string]bool{
		cur:                                    true,
		ProbeImageRepo + ":fedcba9876543210":   true, // an old binary's
		ProbeImageRepo + ":1111111111111111":   true, // an old binary's, in use
		ProbeImageRepo + ":latest":             true, // not a probe tag
		ProbeImageRepo + "-x:2222222222222222": true, // another repository
		"localhost/meshhost-busybox:latest":    true,
	}, inUse: map[string]bool{ProbeImageRepo + ":1111111111111111": true}}
	removed, err := PruneProbeImages(context.Background(), f, cur, nil)
	if !slices.Equal(removed, []string{ProbeImageRepo + ":fedcba9876543210"}) {
		t.Errorf("removed %v, want only the old binary's image not in use", removed)
	}
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("error %v, want the image in use reported", err)
	}
	want := []string{"localhost/meshhost-busybox:latest", ProbeImageRepo + ":0123456789abcdef", ProbeImageRepo + ":1111111111111111",
		ProbeImageRepo + ":latest", ProbeImageRepo + "-x:2222222222222222"}
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(f.tags)); !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	if _, err := PruneProbeImages(context.Background(), f, "localhost/meshhost-busybox:latest", nil); err == nil {
		t.Error("pruning around an image that is no probe image: no error")
	}
}
