package digest_test

import (
	"strings"
	"testing"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

// TestHostNetworkExplained: moving a container onto the host's network
// changes its digest and is explained as the networks field, old and new
// value, like any other network change; the record round-trips it.
func TestHostNetworkExplained(t *testing.T) {
	k := digest.NewRandomKey()
	c := spec.Container{Name: "edge", Image: "caddy"}
	bridge, err := spec.Render(c, &spec.Roster{Generation: 1}, spec.Mode{Names: spec.Copy})
	if err != nil {
		t.Fatal(err)
	}
	c.Networks = []spec.NetworkAttachment{{Name: spec.HostNetwork}}
	host, err := spec.Render(c, &spec.Roster{Generation: 1}, spec.Mode{Names: spec.Copy})
	if err != nil {
		t.Fatal(err)
	}
	if k.Of(bridge) == k.Of(host) {
		t.Fatal("the host's network and podman's default network have one digest")
	}
	changes := k.Explain(bridge, host)
	if len(changes) != 1 || changes[0].Field != "networks" || changes[0].Mutability != spec.Replace {
		t.Fatalf("Explain(default network -> host) = %v, want one replace of networks", changes)
	}
	if s := changes[0].String(); !strings.Contains(s, spec.DefaultNetwork) || !strings.Contains(s, spec.HostNetwork) {
		t.Errorf("the change reads %q, want it to name %q and %q", s, spec.DefaultNetwork, spec.HostNetwork)
	}
	got, err := digest.ParseRecord(k.Record(host))
	if err != nil {
		t.Fatal(err)
	}
	if !got.OnHostNetwork() || len(got.Networks) != 1 {
		t.Errorf("record networks = %+v, want the host's only", got.Networks)
	}
}
