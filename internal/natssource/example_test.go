package natssource_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	"github.com/meshhost/meshhost/internal/natssource"
	"github.com/meshhost/meshhost/spec"
)

// A controller publishes a roster; the change of one name after it costs
// one name's message per machine.
func ExamplePublisher() {
	ctx := context.Background()
	nc, err := natssource.Server{URL: "nats://127.0.0.1:4222"}.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	p, err := natssource.NewPublisher(nc, natssource.LayoutFor(natssource.DefaultPrefix))
	if err != nil {
		log.Fatal(err)
	}
	if err := p.EnsureBuckets(ctx); err != nil {
		log.Fatal(err)
	}
	r := &spec.Roster{Generation: 7, Zones: []string{"internal"}, Names: map[string][]netip.Addr{
		"gitea.novox.internal": {netip.MustParseAddr("10.89.0.7")},
	}}
	if _, err := p.PublishRoster(ctx, r); err != nil {
		log.Fatal(err)
	}
	res, err := p.PublishDelta(ctx, natssource.Delta{Generation: 8, Set: map[string][]netip.Addr{
		"searxng.zurag.be": {netip.MustParseAddr("100.64.0.9")},
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Set, res.Names)
}

// A machine follows the buckets; each applied change arrives as a delta.
func ExampleWatcher() {
	w, err := natssource.NewWatcher(natssource.Config{
		Server:  natssource.Server{URL: "nats://127.0.0.1:4222", Creds: "/etc/meshhost/nats.creds"},
		Machine: "novox",
		OnChange: func(ch *natssource.Change) {
			fmt.Printf("generation %d: %d set, %d removed\n", ch.Generation, len(ch.Set), len(ch.Removed))
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(w.Run(context.Background()))
}
