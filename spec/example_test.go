package spec_test

import (
	"fmt"
	"net/netip"

	"github.com/meshhost/meshhost/spec"
)

func ExampleRender() {
	roster, err := spec.ParseRoster([]byte(`{"generation": 7, "zones": ["internal"],
	  "names": {"gitea.novox.internal": ["10.89.0.7"], "searxng.zurag.be": ["100.64.0.9"]}}`))
	if err != nil {
		panic(err)
	}
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

func ExampleParseDeclaration() {
	_, err := spec.ParseDeclaration([]byte(`{"schema": 1, "machine": "ace", "generation": 3,
	  "roster": {"generation": 1, "names": {}},
	  "containers": [{"name": "db", "image": "postgres:16", "stop_timeout": "6o s"}]}`))
	fmt.Println(err)
	// Output:
	// containers[0].stop_timeout: "6o s" is not a duration (write e.g. "30s" or "2m")
}
