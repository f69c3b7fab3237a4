package spec_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// declaration10000 is a declaration of spec.MaxContainers containers, each
// publishing two host ports and asking a static address on a network, all
// distinct: what validation checks across containers at the limit.
func declaration10000() *spec.Declaration {
	d := &spec.Declaration{Schema: 1, Machine: "novox", Generation: 1, MeshNames: spec.FlagOn,
		Roster: &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}}
	for i := range spec.MaxContainers {
		d.Containers = append(d.Containers, spec.Container{
			Name: fmt.Sprintf("c%d", i), Image: "localhost/app:1",
			Ports: []spec.Port{{HostPort: uint16(10000 + i), ContainerPort: 80},
				{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: uint16(10000 + i), ContainerPort: 53, Protocol: "udp"}},
			Networks: []spec.NetworkAttachment{{Name: "mesh", IPv4: netip.AddrFrom4([4]byte{10, 89, byte(i >> 8), byte(i)})}},
		})
	}
	return d
}

// TestValidateClaimsAcrossContainers: at spec.MaxContainers, host ports
// and static addresses distinct across containers pass, and the last
// container taking the first one's port and address is refused twice,
// naming both.
func TestValidateClaimsAcrossContainers(t *testing.T) {
	d := declaration10000()
	if err := d.Validate(); err != nil {
		t.Fatalf("Validate = %v, want nil", err)
	}
	last := len(d.Containers) - 1
	d.Containers[last].Ports[0].HostPort = d.Containers[0].Ports[0].HostPort
	d.Containers[last].Networks[0].IPv4 = d.Containers[0].Networks[0].IPv4
	err := d.Validate()
	faults := spec.Faults(err)
	if len(faults) != 2 {
		t.Fatalf("Validate = %v, want the port and the address refused", err)
	}
	for i, want := range []string{
		fmt.Sprintf(`containers[%d].ports[0]: host port 10000/tcp is already published by containers[0] "c0"`, last),
		fmt.Sprintf(`containers[%d].networks[0].ipv4: 10.89.0.0 on network "mesh" is already the static address of containers[0] "c0"`, last),
	} {
		if got := faults[i].Error(); !strings.Contains(got, want) {
			t.Errorf("fault %d = %q, want %q", i, got, want)
		}
	}
}

// BenchmarkValidate10000 validates a declaration at spec.MaxContainers
// whose every container publishes host ports and asks a static address.
func BenchmarkValidate10000(b *testing.B) {
	d := declaration10000()
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
