package resolver_test

import (
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec/specjson"
)

func Example() {
	dir, err := os.MkdirTemp("", "resolver-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := resolver.Config{
		Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")},
		Allow:     []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")},
		StatePath: filepath.Join(dir, "roster.json"),
	}
	srv, err := resolver.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	r, err := specjson.ParseRoster([]byte(`{"generation": 7, "zones": ["internal"],
		"names": {"gitea.novox.internal": ["10.89.0.7"]}}`))
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Update(r); err != nil {
		log.Fatal(err)
	}
	// srv.Listen(netip.MustParseAddrPort("10.88.0.1:53")) would now serve
	// the podman network's containers.
	srv.Close()

	// A restarted resolver serves the saved roster before any Update.
	srv, err = resolver.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	fmt.Println(srv.Roster().Generation, srv.Roster().Names["gitea.novox.internal"])
	fmt.Println(resolver.CanaryName("k3x9", "internal"))
	// Output:
	// 7 [10.89.0.7]
	// k3x9.meshhost-probe.internal
}
