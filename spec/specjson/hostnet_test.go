package specjson_test

import (
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// TestParseDeclarationHostNetwork: what a podman user writes for
// `--network host` is accepted as the host's network, and everything only a
// network of its own has is refused with its path, as is every other podman
// network mode spelled as a network (each failed every pass on podman:
// "unable to find network with name or ID").
func TestParseDeclarationHostNetwork(t *testing.T) {
	d, err := specjson.ParseDeclaration([]byte(minimal(`"name": "edge", "image": "caddy", "networks": [{"name": "host"}]`)))
	if err != nil {
		t.Fatalf("ParseDeclaration(host network) = %v, want it accepted", err)
	}
	edge, _ := d.Container("edge")
	if !edge.OnHostNetwork() {
		t.Errorf("edge.OnHostNetwork() = false, want true; networks %+v", edge.Networks)
	}
	r, err := spec.Render(edge, d.Roster, spec.Mode{Names: spec.Copy})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Networks) != 1 || r.Networks[0].Name != spec.HostNetwork {
		t.Errorf("Render(edge).Networks = %+v, want only %q (no default network added)", r.Networks, spec.HostNetwork)
	}

	tests := []struct {
		name string
		doc  string
		want []string // substrings of the error, each naming a path
	}{
		{"host and a bridge network", minimal(`"name": "edge", "image": "b", "networks": [{"name": "host"}, {"name": "mesh"}]`),
			[]string{`containers[0].networks[1].name: "mesh" with networks[0] "host": a container on the host's network has no other network`}},
		{"bridge network before host", minimal(`"name": "edge", "image": "b", "networks": [{"name": "mesh"}, {"name": "host"}]`),
			[]string{`containers[0].networks[0].name: "mesh" with networks[1] "host"`}},
		{"host twice", minimal(`"name": "edge", "image": "b", "networks": [{"name": "host"}, {"name": "host"}]`),
			[]string{`containers[0].networks[1].name: "host" is also networks[0]`}},
		{"aliases", minimal(`"name": "edge", "image": "b", "networks": [{"name": "host", "aliases": ["edge"]}]`),
			[]string{`containers[0].networks[0].aliases: a container on the host's network has no network aliases`}},
		{"static ipv4", minimal(`"name": "edge", "image": "b", "networks": [{"name": "host", "ipv4": "10.0.0.5"}]`),
			[]string{`containers[0].networks[0].ipv4: a container on the host's network has the host's addresses, not a static one`}},
		{"static ipv6", minimal(`"name": "edge", "image": "b", "networks": [{"name": "host", "ipv6": "fd00::5"}]`),
			[]string{`containers[0].networks[0].ipv6: a container on the host's network has the host's addresses`}},
		{"published ports", minimal(`"name": "edge", "image": "b", "networks": [{"name": "host"}], "ports": [{"container_port": 80}, {"host_port": 443, "container_port": 443}]`),
			[]string{`containers[0].ports[0]: a container on the host's network publishes no ports`, `containers[0].ports[1]: a container on the host's network publishes no ports`}},
	}
	for mode := range map[string]bool{"bridge": true, "default": true, "private": true, "none": true, "slirp4netns": true, "pasta": true, "container": true, "ns": true} {
		tests = append(tests, struct {
			name string
			doc  string
			want []string
		}{"mode " + mode, minimal(`"name": "edge", "image": "b", "networks": [{"name": "` + mode + `"}]`),
			[]string{`containers[0].networks[0].name: "` + mode + `" is a podman network mode, not a network: `}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := specjson.ParseDeclaration([]byte(tt.doc))
			if err == nil {
				t.Fatalf("ParseDeclaration = %+v, nil; want an error", d)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ParseDeclaration error =\n%v\nwant it to contain\n%s", err, want)
				}
			}
			if n := len(spec.Faults(err)); n != len(tt.want) {
				t.Errorf("ParseDeclaration gave %d faults, want %d:\n%v", n, len(tt.want), err)
			}
		})
	}
}
