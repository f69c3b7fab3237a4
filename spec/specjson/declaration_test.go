package specjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func TestParseDeclarationExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/declaration.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := specjson.ParseDeclaration(data)
	if err != nil {
		t.Fatalf("ParseDeclaration(examples/declaration.json) = %v", err)
	}
	pg, ok := d.Container("postgres")
	if !ok {
		t.Fatal(`Container("postgres") not found`)
	}
	if pg.StopSignal != "SIGINT" || pg.StopTimeout != 2*time.Minute {
		t.Errorf("postgres stop = %s/%s, want SIGINT/2m", pg.StopSignal, pg.StopTimeout)
	}
	if pg.Resources != (spec.Resources{MemoryBytes: 1 << 30, MilliCPUs: 1500, PidsLimit: 512}) {
		t.Errorf("postgres resources = %+v", pg.Resources)
	}
	gitea, _ := d.Container("gitea")
	if diff := cmp.Diff([]string{"postgres"}, gitea.DependsOn); diff != "" {
		t.Errorf("gitea depends_on (-want +got):\n%s", diff)
	}
	if d.MeshNames != spec.FlagOff || d.Roster.Generation != 7 || len(d.Roster.Names) != 3 {
		t.Errorf("declaration header = %s gen %d names %d", d.MeshNames, d.Roster.Generation, len(d.Roster.Names))
	}

	// Round trip: what MarshalJSON writes, ParseDeclaration reads back equal.
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := specjson.ParseDeclaration(out)
	if err != nil {
		t.Fatalf("ParseDeclaration(MarshalJSON(d)) = %v\n%s", err, out)
	}
	if diff := cmp.Diff(d, d2, cmp.Comparer(func(a, b interface{ String() string }) bool { return a.String() == b.String() })); diff != "" {
		t.Errorf("round trip (-first +second):\n%s", diff)
	}
}

// minimal returns a valid declaration with one container, as JSON, with
// container fields replaced or added by extra (a JSON object body).
func minimal(extra string) string {
	c := `"name": "app", "image": "busybox"`
	if extra != "" {
		c = extra
	}
	return `{"schema": 1, "machine": "ace", "generation": 1,
	  "roster": {"generation": 1, "zones": ["internal"], "names": {"a.internal": ["10.0.0.1"]}},
	  "containers": [{` + c + `}]}`
}

func TestParseDeclarationFaults(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string // a substring of the error, naming the path
	}{
		{"bad duration", minimal(`"name": "app", "image": "b", "stop_timeout": "6o s"`), `containers[0].stop_timeout: "6o s" is not a duration`},
		{"unknown field", minimal(`"name": "app", "image": "b", "stop_timout": "6s"`), `containers[0].stop_timout: unknown field`},
		{"wrong type", minimal(`"name": "app", "image": 7`), `containers[0].image: is a number, want a string`},
		{"duplicate key", minimal(`"name": "app", "name": "b", "image": "b"`), `containers[0].name: key appears twice`},
		{"missing image", minimal(`"name": "app"`), `containers[0].image: is required`},
		{"bad memory", minimal(`"name": "app", "image": "b", "resources": {"memory": "lots"}}`), ``},
		{"reserved label", minimal(`"name": "app", "image": "b", "labels": {"io.meshhost.digest": "x"}`), `containers[0].labels["io.meshhost.digest"]: labels under "io.meshhost." are meshhost's own`},
		{"alias injects hosts line", minimal(`"name": "app", "image": "b", "networks": [{"name": "mesh", "aliases": ["x\n10.0.0.9 evil"]}]`), `containers[0].networks[0].aliases[0]: not a valid host name`},
		{"bad restart", minimal(`"name": "app", "image": "b", "restart": "sometimes"`), `containers[0].restart: "sometimes" is not a restart policy`},
		{"bad signal", minimal(`"name": "app", "image": "b", "stop_signal": "SIGFOO"`), `containers[0].stop_signal: "SIGFOO" is not a stop signal`},
		{"relative mount", minimal(`"name": "app", "image": "b", "mounts": [{"type": "bind", "source": "data", "target": "/d"}]`), `containers[0].mounts[0].source: "data" is not an absolute host path`},
		{"unknown dependency", minimal(`"name": "app", "image": "b", "depends_on": ["db"]`), `containers[0].depends_on[0]: "db" is not a container of this declaration`},
		{"self dependency", minimal(`"name": "app", "image": "b", "depends_on": ["app"]`), `containers[0].depends_on[0]: "app" depends on itself`},
		{"cycle", `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {}},
		  "containers": [{"name": "a", "image": "b", "depends_on": ["b"]}, {"name": "b", "image": "b", "depends_on": ["c"]}, {"name": "c", "image": "b", "depends_on": ["a"]}]}`,
			`cycle: a -> b -> c -> a`},
		{"duplicate container", `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {}},
		  "containers": [{"name": "a", "image": "b"}, {"name": "a", "image": "c"}]}`,
			`containers[1].name: "a" is also the name of containers[0]`},
		{"roster name injects hosts line", `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {"a.internal 10.0.0.66 evil": ["10.0.0.1"]}}, "containers": []}`,
			`roster.names["a.internal 10.0.0.66 evil"]: not a valid host name`},
		{"roster bad address", `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {"a.internal": ["10.0.0.300"]}}, "containers": []}`,
			`roster.names["a.internal"][0]: "10.0.0.300" is not an IP address`},
		{"roster generation zero", `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 0, "names": {}}, "containers": []}`,
			`roster.generation: must be greater than 0`},
		{"newer schema", `{"schema": 2, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {}}, "containers": []}`,
			`schema: schema 2 is newer than this meshhost reads (1); upgrade meshhost`},
		{"bad flag", `{"schema": 1, "machine": "ace", "generation": 1, "mesh_names": "maybe", "roster": {"generation": 1, "names": {}}, "containers": []}`,
			`mesh_names: "maybe" is not a flag`},
		{"reserved aside name", minimal(`"name": "web.meshhost-old", "image": "b"`),
			`containers[0].name: "web.meshhost-old" ends with ".meshhost-old", which meshhost reserves for the old container during a replacement`},
		{"reserved aside name, another declared", `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {}},
		  "containers": [{"name": "web", "image": "b"}, {"name": "web.meshhost-old", "image": "c"}]}`,
			`containers[1].name: "web.meshhost-old" ends with ".meshhost-old"`},
		{"roster name with too many addresses", `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {"a.internal": [` + manyAddrs(spec.MaxAddrsPerName+1) + `]}}, "containers": []}`,
			`roster.names["a.internal"]: has 4001 addresses; at most 4000 fit a DNS answer`},
		{"host port published twice by a container", minimal(`"name": "app", "image": "b", "ports": [{"host_port": 8080, "container_port": 80}, {"host_port": 8080, "container_port": 81}]`),
			`containers[0].ports[1].host_port: 8080/tcp is also published by ports[0]`},
		{"host port published by two containers", twoContainers(`"ports": [{"host_port": 8080, "container_port": 80}]`, `"ports": [{"host_port": 9090, "container_port": 90}, {"host_port": 8080, "container_port": 80, "protocol": "tcp"}]`),
			`containers[1].ports[1]: host port 8080/tcp is already published by containers[0] "web"`},
		{"host address and port published by two containers", twoContainers(`"ports": [{"host_ip": "127.0.0.1", "host_port": 53, "container_port": 53, "protocol": "udp"}]`, `"ports": [{"host_ip": "127.0.0.1", "host_port": 53, "container_port": 5353, "protocol": "udp"}]`),
			`containers[1].ports[0]: host port 127.0.0.1:53/udp is already published by containers[0] "web"`},
		{"static address asked by two containers", twoContainers(`"networks": [{"name": "mesh", "ipv4": "10.89.0.5"}]`, `"networks": [{"name": "edge"}, {"name": "mesh", "ipv4": "10.89.0.5"}]`),
			`containers[1].networks[1].ipv4: 10.89.0.5 on network "mesh" is already the static address of containers[0] "web"`},
		{"static IPv6 address asked by two containers", twoContainers(`"networks": [{"name": "mesh", "ipv6": "fd00::5"}]`, `"networks": [{"name": "mesh", "ipv6": "fd00::5"}]`),
			`containers[1].networks[0].ipv6: fd00::5 on network "mesh" is already the static address of containers[0] "web"`},
		{"trailing data", minimal("") + `{}`, `unexpected data after the top-level value`},
		{"not json", `{"schema": 1,`, `not valid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := specjson.ParseDeclaration([]byte(tt.doc))
			if err == nil {
				t.Fatalf("ParseDeclaration = %+v, nil; want an error", d)
			}
			if d != nil {
				t.Errorf("ParseDeclaration returned a half-parsed declaration with error %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseDeclaration error =\n%v\nwant it to contain\n%s", err, tt.want)
			}
			var fe *spec.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %v is not a *spec.FieldError", err)
			}
		})
	}
}

// twoContainers returns a valid declaration of the containers web and
// api, with the container fields a and b added to each.
func twoContainers(a, b string) string {
	return `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {}},
	  "containers": [{"name": "web", "image": "caddy", ` + a + `}, {"name": "api", "image": "api", ` + b + `}]}`
}

// TestParseDeclarationSharesWhatTheMachineCan: two containers may publish
// one host port under other protocols or on other host addresses, and ask
// one static address on other networks; each container may publish a port
// without a host port (the runtime picks one).
func TestParseDeclarationSharesWhatTheMachineCan(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"other protocol", `"ports": [{"host_port": 53, "container_port": 53}]`, `"ports": [{"host_port": 53, "container_port": 53, "protocol": "udp"}]`},
		{"other host addresses", `"ports": [{"host_ip": "127.0.0.1", "host_port": 80, "container_port": 80}]`, `"ports": [{"host_ip": "127.0.0.2", "host_port": 80, "container_port": 80}]`},
		{"no host port", `"ports": [{"container_port": 80}]`, `"ports": [{"container_port": 80}]`},
		{"one address on other networks", `"networks": [{"name": "mesh", "ipv4": "10.89.0.5"}]`, `"networks": [{"name": "edge", "ipv4": "10.89.0.5"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := specjson.ParseDeclaration([]byte(twoContainers(tc.a, tc.b))); err != nil {
				t.Errorf("ParseDeclaration = %v, want it accepted", err)
			}
		})
	}
}

// manyAddrs returns n distinct IPv4 addresses as JSON strings, comma-separated.
func manyAddrs(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf(`"10.%d.%d.%d"`, i>>16&0xFF, i>>8&0xFF, i&0xFF)
	}
	return strings.Join(s, ",")
}

func TestParseDeclarationReportsEveryFault(t *testing.T) {
	_, err := specjson.ParseDeclaration([]byte(minimal(`"name": "app", "image": "b", "stop_timeout": "x", "stop_signal": "SIGFOO", "extra": 1`)))
	for _, want := range []string{"containers[0].stop_timeout", "containers[0].stop_signal", "containers[0].extra"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func FuzzParseDeclaration(f *testing.F) {
	data, err := os.ReadFile("../../examples/declaration.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(minimal("")))
	f.Add([]byte(`{"schema":1,"containers":[{"depends_on":["a"],"name":"a"}]}`))
	f.Add([]byte(`{"schema":1,"machine":"m","generation":1,"roster":{"generation":1,"names":{"a":["10.0.0.1"]}},"roster":{"generation":2,"names":{}},"containers":[]}`))
	f.Add([]byte(`{"schema":1,"machine":"m","generation":1,"roster":{"generation":1,"names":{"A.b":["10.0.0.2","10.0.0.1"]}},"containers":[],"x":"\"roster\""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDeclarationReadersAgree(t, data)
		d, err := specjson.ParseDeclaration(data)
		if (d == nil) == (err == nil) {
			t.Fatalf("ParseDeclaration = %v, %v: want exactly one of them", d, err)
		}
		if err != nil {
			return
		}
		// Whatever parses must survive its own round trip.
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
		if _, err := specjson.ParseDeclaration(out); err != nil {
			t.Fatalf("ParseDeclaration(MarshalJSON(d)) = %v\n%s", err, out)
		}
	})
}

// checkDeclarationReadersAgree: whatever the fast path takes, the strict
// reader takes too, with the same result.
func checkDeclarationReadersAgree(t *testing.T, data []byte) {
	t.Helper()
	fast, ok := specjson.ParseDeclarationFast(data)
	if !ok {
		return
	}
	strict, err := specjson.ParseDeclarationStrict(data)
	if err != nil {
		t.Fatalf("fast path took a declaration the strict reader refuses (%v):\n%s", err, data)
	}
	if diff := cmp.Diff(strict, fast, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("fast path and strict reader differ (-strict +fast):\n%s\n%s", diff, data)
	}
}

// TestDeclarationReadersAgree runs the check on the example declaration,
// which the fast path must take, and on the fuzz seeds.
func TestDeclarationReadersAgree(t *testing.T) {
	data, err := os.ReadFile("../../examples/declaration.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := specjson.ParseDeclarationFast(data); !ok {
		t.Error("fast path declined examples/declaration.json")
	}
	checkDeclarationReadersAgree(t, data)
	for _, doc := range []string{
		minimal(""),
		`{"schema":1,"machine":"m","generation":1,"roster":{"generation":1,"names":{"a":["10.0.0.1"]}},"roster":{"generation":2,"names":{}},"containers":[]}`,
		`{"schema":1,"machine":"m","generation":1,"roster":{"generation":1,"names":{"A.b":["10.0.0.2","10.0.0.1"]}},"containers":[],"x":"\"roster\""}`,
	} {
		checkDeclarationReadersAgree(t, []byte(doc))
	}
}
