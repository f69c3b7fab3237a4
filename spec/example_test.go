package spec_test

import (
	"fmt"
	"net/netip"

	"github.com/meshhost/meshhost/spec"
)

func ExampleRender() {
	roster := &spec.Roster{Generation: 7, Zones: []string{"internal"}, Names: map[string][]netip.Addr{
		"gitea.novox.internal": {netip.MustParseAddr("10.89.0.7")},
		"searxng.zurag.be":     {netip.MustParseAddr("100.64.0.9")},
	}}
	app := spec.Container{Name: "app", Image: "busybox"}

	copied, _ := spec.Render(app, roster, spec.Mode{Names: spec.Copy})
	for _, line := range copied.HostsLines() {
		fmt.Println(line)
	}

	resolved, _ := spec.Render(app, roster, spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{
		Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")},
		Search:  []string{"internal"},
		Options: []string{"ndots:1"},
	}})
	fmt.Print(resolved.ResolvConf())
	// Output:
	// 10.89.0.7	gitea.novox.internal
	// 100.64.0.9	searxng.zurag.be
	// search internal
	// nameserver 10.88.0.1
	// options ndots:1
}
