package migrations_test

import (
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/spec"
)

// ExampleGate: under flag "on" a container stays in copy mode until a
// probe on its network passed; then it resolves mesh names through the
// resolver on the address the probe proved. The gate fails closed: a
// container on a network not yet proven keeps its copy.
func ExampleGate() {
	dir, err := os.MkdirTemp("", "gate-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	gate, err := migrations.OpenGate(migrations.GateConfig{
		Path: filepath.Join(dir, "migrations.json"), Owner: "ace",
		Now: func() time.Time { return now },
	})
	if err != nil {
		log.Fatal(err)
	}

	podman := migrations.Network{Name: "podman", Driver: "bridge", Subnets: []migrations.Subnet{{
		Prefix: netip.MustParsePrefix("10.88.0.0/16"), Gateway: netip.MustParseAddr("10.88.0.1"),
	}}}
	mesh := migrations.Network{Name: "mesh", Driver: "bridge", Subnets: []migrations.Subnet{{
		Prefix: netip.MustParsePrefix("10.89.0.0/24"), Gateway: netip.MustParseAddr("10.89.0.1"),
	}}}
	d := &spec.Declaration{Schema: 1, Machine: "ace", Generation: 1, MeshNames: spec.FlagOn, Containers: []spec.Container{
		{Name: "web", Image: "localhost/web:1"}, // the runtime's default network
		{Name: "db", Image: "localhost/db:1", Networks: []spec.NetworkAttachment{{Name: "mesh"}}},
	}}
	if err := gate.Declare(d); err != nil {
		log.Fatal(err)
	}
	if _, err := gate.Observe([]migrations.Network{podman, mesh}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("to probe:", gate.NeedsProbe())
	show := func() {
		modes := gate.Modes(d.Containers, nil)
		for _, c := range d.Containers {
			fmt.Printf("  %s: %s %v\n", c.Name, modes[c.Name].Names, modes[c.Name].DNS.Servers)
		}
	}
	show()

	// What a Runner's probe of the default network reports when it passed.
	err = gate.Record([]migrations.Result{{
		Network: "podman", Driver: "bridge", Kind: migrations.KindOf(podman), Pass: true, At: now,
		Strategy: migrations.StrategyGateway, Reason: "canary answered",
		DNS: spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Options: []string{"ndots:1"}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after podman's probe passed:")
	show()
	// Output:
	// to probe: [mesh podman]
	//   web: copy []
	//   db: copy []
	// after podman's probe passed:
	//   web: resolve [10.88.0.1]
	//   db: copy []
}

// ExampleUsedNetworks: the networks a declaration's containers use, the
// ones whose probes hold a machine under flag "auto" back; a container
// that declares none is on the runtime's default network.
func ExampleUsedNetworks() {
	fmt.Println(migrations.UsedNetworks([]spec.Container{
		{Name: "web"},
		{Name: "db", Networks: []spec.NetworkAttachment{{Name: "mesh"}, {Name: "backup"}}},
	}))
	// Output: [backup mesh podman]
}
