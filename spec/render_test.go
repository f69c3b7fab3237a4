package spec_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

func roster(names map[string]string) *spec.Roster {
	r := &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for n, a := range names {
		r.Names[n] = []netip.Addr{netip.MustParseAddr(a)}
	}
	return r
}

var resolveMode = spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{
	Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")},
	Search:  []string{"internal"},
	Options: []string{"ndots:1"},
}}

func TestRenderIsDeterministic(t *testing.T) {
	c := spec.Container{
		Name: "app", Image: "busybox",
		Env:    map[string]string{"A": "1", "B": "2", "C": "3", "D": "4"},
		Labels: map[string]string{"x": "1", "y": "2", "z": "3"},
		Ports:  []spec.Port{{ContainerPort: 81}, {ContainerPort: 80}},
	}
	names := map[string]string{}
	for i := range 50 {
		names[fmt.Sprintf("svc%d.internal", i)] = fmt.Sprintf("10.0.0.%d", i+1)
	}
	first, err := spec.Render(c, roster(names), spec.Mode{Names: spec.Copy})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(first)
	for range 20 { // map iteration order differs on each pass
		got, err := spec.Render(c, roster(names), spec.Mode{Names: spec.Copy})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(got); string(b) != string(want) {
			t.Fatalf("Render is not deterministic:\n%s\n%s", want, b)
		}
	}
}

func TestRenderModes(t *testing.T) {
	c := spec.Container{Name: "app", Image: "busybox"}
	r := roster(map[string]string{"b.internal": "10.0.0.2", "a.internal": "10.0.0.1"})

	copied, err := spec.Render(c, r, spec.Mode{Names: spec.Copy})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.0.0.1\ta.internal", "10.0.0.2\tb.internal"}, copied.HostsLines()); diff != "" {
		t.Errorf("copy mode hosts (-want +got):\n%s", diff)
	}
	if copied.ResolvConf() != "" {
		t.Errorf("copy mode ResolvConf = %q, want none", copied.ResolvConf())
	}

	resolved, err := spec.Render(c, nil, resolveMode)
	if err != nil {
		t.Fatal(err)
	}
	if len(resolved.Hosts) != 0 {
		t.Errorf("resolve mode hosts = %v, want none", resolved.Hosts)
	}
	if want := "search internal\nnameserver 10.88.0.1\noptions ndots:1\n"; resolved.ResolvConf() != want {
		t.Errorf("ResolvConf = %q, want %q", resolved.ResolvConf(), want)
	}

	if _, err := spec.Render(c, nil, spec.Mode{Names: spec.Copy}); err == nil {
		t.Error("Render(copy, nil roster) = nil error")
	}
	if _, err := spec.Render(c, nil, spec.Mode{Names: spec.Resolve}); err == nil {
		t.Error("Render(resolve, no server) = nil error")
	}
}

func TestRenderAppliesDefaults(t *testing.T) {
	bare, _ := spec.Render(spec.Container{Name: "a", Image: "i"}, nil, resolveMode)
	explicit, _ := spec.Render(spec.Container{
		Name: "a", Image: "i",
		StopSignal: "term", StopTimeout: 10 * time.Second,
		Restart:  spec.RestartPolicy{Name: "no"},
		Networks: []spec.NetworkAttachment{{Name: "podman"}},
		Env:      map[string]string{}, Command: []string{},
	}, nil, resolveMode)
	if diff := cmp.Diff(bare, explicit, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("defaults not applied (-bare +explicit):\n%s", diff)
	}
}
