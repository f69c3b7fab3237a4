package reconcile_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// pass is what a pass asks of Render, Plan and the runtime for a
// declaration: each container rendered in copy mode (with the
// declaration's roster) and in resolve mode, then planned against an empty
// in-memory runtime and applied there (which refuses to start a container
// on a host port or static address a running one holds, as podman does).
func pass(d *spec.Declaration) error {
	for _, m := range []spec.Mode{{Names: spec.Copy}, resolveMode} {
		desired := make([]spec.Rendered, 0, len(d.Containers))
		for _, c := range d.Containers {
			r, err := spec.Render(c, d.Roster, m)
			if err != nil {
				return err
			}
			desired = append(desired, r)
		}
		r, err := reconcile.New(reconcile.Config{Runtime: memory.New(memory.Options{})})
		if err != nil {
			return err
		}
		p, err := r.Plan(context.Background(), desired)
		if err != nil {
			return err
		}
		res, err := r.Apply(context.Background(), p)
		if err != nil {
			return err
		}
		if err := res.Err(); err != nil {
			return err
		}
	}
	return nil
}

func validDeclaration() *spec.Declaration {
	return &spec.Declaration{Schema: 1, Machine: "ace", Generation: 1, MeshNames: spec.FlagOn,
		Roster: &spec.Roster{Generation: 1, Zones: []string{"internal"},
			Names: map[string][]netip.Addr{"gitea.ace.internal": {netip.MustParseAddr("10.89.0.7")}}},
		Containers: []spec.Container{{Name: "db", Image: "postgres:16"}, {Name: "web", Image: "caddy:2", DependsOn: []string{"db"}}}}
}

// TestPassRefusalsCaughtAtParse: every reason Plan and Render refuse a
// declaration's containers is refused by spec.ParseDeclaration first,
// naming the field, so a declaration is refused when it is pushed (the
// controller hears why) instead of failing every pass of the machine, across
// restarts, since the agent saves the declaration it acts on (issue 17,
// bug 5). Each case is checked both ways: the pass refuses the declaration
// when validation is bypassed, and parsing its document refuses it with the
// path.
//
// Render's other refusals (resolve mode without a DNS server or with an
// invalid one, an unknown name mode) are about the mode the migration gate
// gives, not about the declaration: migrations' TestGateNeverUnproven
// checks the gate never gives resolve mode without proven servers.
func TestPassRefusalsCaughtAtParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(d *spec.Declaration)
		path string
	}{
		{"Plan: a container without a name", func(d *spec.Declaration) { d.Containers[0].Name = "" }, "containers[0].name"},
		{"Plan: a name ending with the aside suffix", func(d *spec.Declaration) { d.Containers[1].Name = "db" + reconcile.AsideSuffix }, "containers[1].name"},
		{"Plan: the aside suffix alone", func(d *spec.Declaration) { d.Containers[0].Name = reconcile.AsideSuffix[1:] + reconcile.AsideSuffix }, "containers[0].name"},
		{"Plan: a container declared twice", func(d *spec.Declaration) { d.Containers[1].Name = "db"; d.Containers[1].DependsOn = nil }, "containers[1].name"},
		{"Render: copy mode without a roster", func(d *spec.Declaration) { d.Roster = nil }, "roster"},
		{"Start: a host port published by two containers", func(d *spec.Declaration) {
			for i := range d.Containers {
				d.Containers[i].Ports = []spec.Port{{HostPort: 8080, ContainerPort: 80 + uint16(i)}}
			}
		}, "containers[1].ports[0]"},
		{"Start: a host address, port and protocol published by two containers", func(d *spec.Declaration) {
			for i := range d.Containers {
				d.Containers[i].Ports = []spec.Port{{HostPort: 5353 + uint16(i), ContainerPort: 53, Protocol: "tcp"},
					{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 5300, ContainerPort: 53, Protocol: "udp"}}
			}
		}, "containers[1].ports[1]"},
		{"Start: a static IPv4 address asked by two containers on one network", func(d *spec.Declaration) {
			for i := range d.Containers {
				d.Containers[i].Networks = []spec.NetworkAttachment{{Name: "mesh", IPv4: netip.MustParseAddr("10.89.0.5")}}
			}
		}, "containers[1].networks[0].ipv4"},
		{"Start: a static IPv6 address asked by two containers on one network", func(d *spec.Declaration) {
			d.Containers[0].Networks = []spec.NetworkAttachment{{Name: "mesh", IPv6: netip.MustParseAddr("fd00::5")}}
			d.Containers[1].Networks = []spec.NetworkAttachment{{Name: "edge"}, {Name: "mesh", IPv6: netip.MustParseAddr("fd00::5")}}
		}, "containers[1].networks[1].ipv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := validDeclaration()
			tc.edit(d)
			if err := pass(d); err == nil {
				t.Fatal("the pass accepts the declaration: not a refusal to check")
			}
			doc, err := d.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			_, err = specjson.ParseDeclaration(doc)
			var fe *spec.FieldError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.path+": ") {
				t.Errorf("specjson.ParseDeclaration(%s) = %v, want a *spec.FieldError at %s", doc, err, tc.path)
			}
		})
	}
	if err := pass(validDeclaration()); err != nil {
		t.Errorf("the valid declaration: %v", err)
	}
}

// FuzzParsedDeclarationPasses: whatever spec.ParseDeclaration accepts,
// Render (in both modes) and Plan accept too.
func FuzzParsedDeclarationPasses(f *testing.F) {
	for _, path := range []string{"../examples/declaration.json", "../examples/busybox.json"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	doc, _ := validDeclaration().MarshalJSON()
	f.Add(doc)
	f.Add([]byte(`{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {}},
	  "containers": [{"name": "web.meshhost-old", "image": "b"}, {"name": "web", "image": "b"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		d, err := specjson.ParseDeclaration(doc)
		if err != nil {
			return
		}
		if err := pass(d); err != nil {
			t.Fatalf("ParseDeclaration accepts the declaration, the pass refuses it: %v\n%s", err, doc)
		}
	})
}
