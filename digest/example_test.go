package digest_test

import (
	"fmt"
	"net/netip"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

func ExampleKey_Explain() {
	before := &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{
		"gitea.novox.internal": {netip.MustParseAddr("10.89.0.7")},
	}}
	after := &spec.Roster{Generation: 2, Names: map[string][]netip.Addr{
		"gitea.novox.internal": {netip.MustParseAddr("10.89.0.7")},
		"searxng.zurag.be":     {netip.MustParseAddr("100.64.0.9")},
	}}
	app := spec.Container{Name: "app", Image: "busybox"}
	old, _ := spec.Render(app, before, spec.Mode{Names: spec.Copy})
	new, _ := spec.Render(app, after, spec.Mode{Names: spec.Copy})

	// In copy mode one new name changes the create-time settings: a replace.
	ok, _ := digest.Matches(digest.Of(old), new)
	fmt.Println("still matches:", ok)
	key := digest.NewRandomKey() // the agent's: statedir.Dir.LoadHashKey
	for _, c := range key.Explain(old, new) {
		fmt.Println(c)
	}
	// Output:
	// still matches: false
	// hosts: +searxng.zurag.be=100.64.0.9
}
