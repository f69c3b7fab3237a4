package doccheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/meshhost/meshhost/internal/demo/incident"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

const schemaBase = "https://github.com/meshhost/meshhost/blob/main/docs/schema/"

// schemas compiles docs/schema's two schemas, formats asserted (an "ipv4"
// that is not one is refused).
func schemas(t *testing.T) (declaration, roster *jsonschema.Schema) {
	t.Helper()
	root := repoRoot(t)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	for _, name := range []string{"declaration.schema.json", "roster.schema.json"} {
		f, err := os.Open(filepath.Join(root, "docs", "schema", name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(f)
		f.Close()
		if err != nil {
			t.Fatalf("docs/schema/%s: %v", name, err)
		}
		if id, _ := doc.(map[string]any)["$id"].(string); id != schemaBase+name {
			t.Fatalf("docs/schema/%s: $id %q, want %q", name, id, schemaBase+name)
		}
		if err := c.AddResource(schemaBase+name, doc); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if declaration, err = c.Compile(schemaBase + "declaration.schema.json"); err != nil {
		t.Fatal(err)
	}
	if roster, err = c.Compile(schemaBase + "roster.schema.json"); err != nil {
		t.Fatal(err)
	}
	return declaration, roster
}

func validate(s *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// isRoster tells a roster document (top-level "names") from a declaration.
func isRoster(data []byte) bool {
	var top map[string]json.RawMessage
	_ = json.Unmarshal(data, &top)
	_, ok := top["names"]
	return ok
}

// parse reads data with the strict reader the agent uses for its kind.
func parse(data []byte) error {
	switch {
	case isRoster(data):
		_, err := specjson.ParseRoster(data)
		return err
	case specjson.IsDeclarationDelta(data):
		_, err := specjson.ParseDeclarationDelta(data)
		return err
	default:
		_, err := specjson.ParseDeclaration(data)
		return err
	}
}

// TestSchemasAcceptTheExamples: every document under examples/, and every
// declaration of the demo's incident (copy and resolve mode, each
// action), is accepted by the strict reader and by its schema.
func TestSchemasAcceptTheExamples(t *testing.T) {
	decl, roster := schemas(t)
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "examples", "*.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("examples/*.json: %v, %v; want at least the declaration, busybox, new, delta and roster", files, err)
	}
	docs := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs["examples/"+filepath.Base(f)] = data
	}
	m := incident.New()
	for _, flag := range []spec.MeshNamesFlag{spec.FlagOff, spec.FlagOn} {
		for machine, d := range m.Declarations(flag) {
			data, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			docs["incident/"+machine+"/"+string(flag)] = data
		}
		for i, a := range incident.Actions() {
			for machine, d := range m.Push(a, flag) {
				data, err := json.Marshal(d)
				if err != nil {
					t.Fatal(err)
				}
				docs["incident/"+machine+"/"+string(flag)+"/action"+string(rune('0'+i))] = data
			}
		}
	}
	for name, data := range docs {
		t.Run(name, func(t *testing.T) {
			if err := parse(data); err != nil {
				t.Fatalf("the strict reader refuses it: %v", err)
			}
			s := decl
			if isRoster(data) {
				s = roster
			}
			if err := validate(s, data); err != nil {
				t.Errorf("the schema refuses it: %v", err)
			}
		})
	}
}

// del, in a case's change, removes the member.
type deleted struct{}

var del = deleted{}

// change returns a copy of the JSON document data with the value at path
// (member names and array indices) set to v, or removed when v is del.
func change(t *testing.T, data []byte, path []any, v any) []byte {
	t.Helper()
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	parent := doc
	for i, step := range path {
		last := i == len(path)-1
		switch s := step.(type) {
		case string:
			obj := parent.(map[string]any)
			if last {
				if v == del {
					delete(obj, s)
				} else {
					obj[s] = v
				}
			}
			parent = obj[s]
		case int:
			arr := parent.([]any)
			if last {
				arr[s] = v
			}
			parent = arr[s]
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSchemasRefuseWhatTheReaderRefuses: field by field, a document the
// strict reader refuses with a fault at a path is refused by the schema
// too. Each case changes one field of a valid example; the reader must
// name that field (so the case is the field's, not another fault), and
// the schema must refuse the document.
func TestSchemasRefuseWhatTheReaderRefuses(t *testing.T) {
	decl, roster := schemas(t)
	root := repoRoot(t)
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(root, "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	full, busybox, delta, rosterDoc := read("declaration.json"), read("busybox.json"), read("delta.json"), read("roster.json")
	c0 := func(p ...any) []any { return append([]any{"containers", 0}, p...) }
	for _, tc := range []struct {
		name string
		base []byte
		path []any
		v    any
		want string // the reader's fault path (a prefix of it)
	}{
		{"unknown member", busybox, []any{"extra"}, 1, "extra"},
		{"schema newer", busybox, []any{"schema"}, 2, "schema"},
		{"schema a string", busybox, []any{"schema"}, "1", "schema"},
		{"machine not a name", busybox, []any{"machine"}, "Demo_1", "machine"},
		{"generation 0", busybox, []any{"generation"}, 0, "generation"},
		{"generation negative", busybox, []any{"generation"}, -3, "generation"},
		{"mesh_names unknown", busybox, []any{"mesh_names"}, "maybe", "mesh_names"},
		{"roster missing", busybox, []any{"roster"}, del, "roster"},
		{"containers missing", busybox, []any{"containers"}, del, "containers"},
		{"containers an object", busybox, []any{"containers"}, map[string]any{}, "containers"},
		{"roster generation a string", busybox, []any{"roster", "generation"}, "1", "roster.generation"},
		{"roster unknown member", busybox, []any{"roster", "extra"}, true, "roster.extra"},
		{"roster names missing", busybox, []any{"roster", "names"}, del, "roster.names"},
		{"roster name not a host name", busybox, []any{"roster", "names", "db..demo.internal"}, []any{"10.0.0.1"}, `roster.names["db..demo.internal"]`},
		{"roster name with an underscore", busybox, []any{"roster", "names", "db_1.demo.internal"}, []any{"10.0.0.1"}, `roster.names["db_1.demo.internal"]`},
		{"roster name without addresses", busybox, []any{"roster", "names", "db.demo.internal"}, []any{}, `roster.names["db.demo.internal"]`},
		{"roster address not an address", busybox, []any{"roster", "names", "db.demo.internal"}, []any{"10.89.0.256"}, `roster.names["db.demo.internal"][0]`},
		{"roster address with a zone", busybox, []any{"roster", "names", "db.demo.internal"}, []any{"fe80::1%eth0"}, `roster.names["db.demo.internal"]`},
		{"roster address IPv4-mapped", busybox, []any{"roster", "names", "db.demo.internal"}, []any{"::ffff:10.0.0.1"}, `roster.names["db.demo.internal"][0]`},
		{"roster address twice", busybox, []any{"roster", "names", "db.demo.internal"}, []any{"10.0.0.1", "10.0.0.1"}, `roster.names["db.demo.internal"][1]`},
		{"roster zone not a name", busybox, []any{"roster", "zones"}, []any{"-internal"}, "roster.zones[0]"},
		{"roster zone twice", busybox, []any{"roster", "zones"}, []any{"internal", "internal"}, "roster.zones[1]"},
		{"container unknown member", busybox, c0("privileged"), true, "containers[0].privileged"},
		{"container name with a space", busybox, c0("name"), "walk through", "containers[0].name"},
		{"container name meshhost's", busybox, c0("name"), "db.meshhost-old", "containers[0].name"},
		{"container name missing", busybox, c0("name"), del, "containers[0].name"},
		{"image missing", busybox, c0("image"), del, "containers[0].image"},
		{"image with a space", busybox, c0("image"), "busybox latest", "containers[0].image"},
		{"command a string", busybox, c0("command"), "sleep 1", "containers[0].command"},
		{"env value a number", busybox, c0("env", "ROLE"), 5, `containers[0].env.ROLE`},
		{"env name with =", busybox, c0("env", "A=B"), "x", `containers[0].env["A=B"]`},
		{"label meshhost's", busybox, c0("labels"), map[string]any{"io.meshhost.owner": "x"}, `containers[0].labels["io.meshhost.owner"]`},
		{"stop_timeout not a duration", busybox, c0("stop_timeout"), "6o s", "containers[0].stop_timeout"},
		{"stop_timeout negative", busybox, c0("stop_timeout"), "-5s", "containers[0].stop_timeout"},
		{"stop_timeout a number", busybox, c0("stop_timeout"), 30, "containers[0].stop_timeout"},
		{"stop_signal unknown", busybox, c0("stop_signal"), "SIGFOO", "containers[0].stop_signal"},
		{"restart unknown", busybox, c0("restart"), "sometimes", "containers[0].restart"},
		{"restart empty", busybox, c0("restart"), "", "containers[0].restart"},
		{"healthcheck test empty", busybox, c0("healthcheck", "test"), []any{}, "containers[0].healthcheck.test"},
		{"healthcheck interval not a duration", busybox, c0("healthcheck", "interval"), "soon", "containers[0].healthcheck.interval"},
		{"healthcheck retries too many", busybox, c0("healthcheck", "retries"), 2000, "containers[0].healthcheck.retries"},
		{"healthcheck unknown member", busybox, c0("healthcheck", "every"), "2s", "containers[0].healthcheck.every"},
		{"mount type unknown", busybox, c0("mounts", 0, "type"), "nfs", "containers[0].mounts[0].type"},
		{"mount volume name with a space", busybox, c0("mounts", 0, "source"), "my data", "containers[0].mounts[0].source"},
		{"mount volume without source", busybox, c0("mounts", 0, "source"), del, "containers[0].mounts[0].source"},
		{"mount target missing", busybox, c0("mounts", 0, "target"), del, "containers[0].mounts[0].target"},
		{"mount target relative", busybox, c0("mounts", 0, "target"), "data", "containers[0].mounts[0].target"},
		{"mount read_only a string", busybox, c0("mounts", 0, "read_only"), "yes", "containers[0].mounts[0].read_only"},
		{"ports an object", busybox, c0("ports"), map[string]any{"container_port": 80}, "containers[0].ports"},
		{"port container_port 0", busybox, c0("ports"), []any{map[string]any{"container_port": 0}}, "containers[0].ports[0].container_port"},
		{"port container_port missing", busybox, c0("ports"), []any{map[string]any{"host_port": 80}}, "containers[0].ports[0].container_port"},
		{"port host_port too big", busybox, c0("ports"), []any{map[string]any{"container_port": 80, "host_port": 70000}}, "containers[0].ports[0].host_port"},
		{"port protocol unknown", busybox, c0("ports"), []any{map[string]any{"container_port": 80, "protocol": "icmp"}}, "containers[0].ports[0].protocol"},
		{"port host_ip not an address", busybox, c0("ports"), []any{map[string]any{"container_port": 80, "host_ip": "localhost"}}, "containers[0].ports[0].host_ip"},
		{"network ipv4 an IPv6 address", busybox, c0("networks"), []any{map[string]any{"name": "mesh", "ipv4": "fd00::1"}}, "containers[0].networks[0].ipv4"},
		{"network name missing", busybox, c0("networks"), []any{map[string]any{"aliases": []any{"db"}}}, "containers[0].networks[0].name"},
		{"network alias not a host name", busybox, c0("networks"), []any{map[string]any{"name": "mesh", "aliases": []any{"a..b"}}}, "containers[0].networks[0].aliases[0]"},
		{"cap_add not a capability", busybox, c0("cap_add"), []any{"NET ADMIN"}, "containers[0].cap_add[0]"},
		{"resources cpus not a number", busybox, c0("resources"), map[string]any{"cpus": "lots"}, "containers[0].resources.cpus"},
		{"resources pids negative", busybox, c0("resources"), map[string]any{"pids": -1}, "containers[0].resources.pids"},
		{"every field: restart unknown", full, c0("restart"), "on-success", "containers[0].restart"},
		{"delta generation 0", delta, []any{"roster_delta", "generation"}, 0, "roster_delta.generation"},
		{"delta from missing", delta, []any{"roster_delta", "from"}, del, "roster_delta.from"},
		{"delta unknown member", delta, []any{"roster_delta", "add"}, map[string]any{}, "roster_delta.add"},
		{"delta set address not an address", delta, []any{"roster_delta", "set", "queue.demo.internal"}, []any{"ten"}, `roster_delta.set["queue.demo.internal"][0]`},
		{"delta set name without addresses", delta, []any{"roster_delta", "set", "queue.demo.internal"}, []any{}, `roster_delta.set["queue.demo.internal"]`},
		{"delta remove not a name", delta, []any{"roster_delta", "remove"}, []any{"a..b"}, "roster_delta.remove[0]"},
		{"delta remove twice", delta, []any{"roster_delta", "remove"}, []any{"a.internal", "a.internal"}, "roster_delta.remove[1]"},
		{"delta with containers", delta, []any{"containers"}, []any{}, "containers"},
		{"delta machine not a name", delta, []any{"machine"}, "-demo", "machine"},
		{"roster file: unknown member", rosterDoc, []any{"ttl"}, 5, "ttl"},
		{"roster file: generation negative", rosterDoc, []any{"generation"}, -1, "generation"},
		{"roster file: name not a host name", rosterDoc, []any{"names", "gitea..internal"}, []any{"10.0.0.1"}, `names["gitea..internal"]`},
		{"roster file: address not an address", rosterDoc, []any{"names", "gitea.novox.internal"}, []any{"10.0.0"}, `names["gitea.novox.internal"][0]`},
		{"roster file: zones a string", rosterDoc, []any{"zones"}, "internal", "zones"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := change(t, tc.base, tc.path, tc.v)
			err := parse(data)
			if err == nil {
				t.Fatalf("the strict reader accepts %s", data)
			}
			var paths []string
			for _, f := range spec.Faults(err) {
				paths = append(paths, f.Path)
			}
			found := false
			for _, p := range paths {
				found = found || strings.HasPrefix(p, tc.want)
			}
			if !found {
				t.Fatalf("the reader's faults are at %q (%v), none at %s: the case does not test that field", paths, err, tc.want)
			}
			s := decl
			if isRoster(data) {
				s = roster
			}
			err = validate(s, data)
			var ve *jsonschema.ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("the schema accepts what the reader refuses at %s (%v): %s", tc.want, spec.Faults(parse(data)), data)
			}
		})
	}
}
