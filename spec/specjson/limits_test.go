package specjson_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// container returns one container's JSON with fields (already JSON
// members) after its name and image.
func container(fields string) string {
	if fields != "" {
		fields = ", " + fields
	}
	return `{"name": "app", "image": "busybox"` + fields + `}`
}

func declWith(containers ...string) string {
	return `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "names": {}}, "containers": [` +
		strings.Join(containers, ",") + `]}`
}

// jsonList is n JSON strings made by item, comma-separated.
func jsonList(n int, item func(i int) string) string {
	s := make([]string, n)
	for i := range s {
		b, _ := json.Marshal(item(i))
		s[i] = string(b)
	}
	return strings.Join(s, ",")
}

// jsonMap is an object of n members key(i): value(i).
func jsonMap(n int, key, value func(i int) string) string {
	s := make([]string, n)
	for i := range s {
		k, _ := json.Marshal(key(i))
		v, _ := json.Marshal(value(i))
		s[i] = string(k) + ":" + string(v)
	}
	return "{" + strings.Join(s, ",") + "}"
}

func objects(n int, item func(i int) string) string {
	s := make([]string, n)
	for i := range s {
		s[i] = item(i)
	}
	return strings.Join(s, ",")
}

// TestLimits feeds a document one past every limit of package spec, and
// one at it, and checks that the first is refused naming the path and
// the limit, and the second accepted: every list and map a declaration or
// a roster holds is bounded.
func TestLimits(t *testing.T) {
	word := func(i int) string { return fmt.Sprintf("w%d", i) }
	envKey := func(i int) string { return fmt.Sprintf("K%d", i) }
	tests := []struct {
		name     string
		over, at string // documents one past the limit and at it
		want     string // in the refusal of over
		isRoster bool
	}{
		{
			name: "containers",
			over: declWith(objects(spec.MaxContainers+1, func(i int) string { return fmt.Sprintf(`{"name": "c%d", "image": "b"}`, i) })),
			at:   declWith(objects(spec.MaxContainers, func(i int) string { return fmt.Sprintf(`{"name": "c%d", "image": "b"}`, i) })),
			want: fmt.Sprintf("containers: %d containers; at most %d", spec.MaxContainers+1, spec.MaxContainers),
		},
		{
			name: "command",
			over: declWith(container(`"command": [` + jsonList(spec.MaxArgs+1, word) + `]`)),
			at:   declWith(container(`"command": [` + jsonList(spec.MaxArgs, word) + `]`)),
			want: fmt.Sprintf("containers[0].command: %d arguments; at most %d", spec.MaxArgs+1, spec.MaxArgs),
		},
		{
			name: "entrypoint",
			over: declWith(container(`"entrypoint": [` + jsonList(spec.MaxArgs+1, word) + `]`)),
			at:   declWith(container(`"entrypoint": [` + jsonList(spec.MaxArgs, word) + `]`)),
			want: fmt.Sprintf("containers[0].entrypoint: %d arguments; at most %d", spec.MaxArgs+1, spec.MaxArgs),
		},
		{
			name: "healthcheck test",
			over: declWith(container(`"healthcheck": {"test": [` + jsonList(spec.MaxArgs+1, word) + `]}`)),
			at:   declWith(container(`"healthcheck": {"test": [` + jsonList(spec.MaxArgs, word) + `]}`)),
			want: fmt.Sprintf("containers[0].healthcheck.test: %d arguments; at most %d", spec.MaxArgs+1, spec.MaxArgs),
		},
		{
			name: "env entries",
			over: declWith(container(`"env": ` + jsonMap(spec.MaxEnv+1, envKey, word))),
			at:   declWith(container(`"env": ` + jsonMap(spec.MaxEnv, envKey, word))),
			want: fmt.Sprintf("containers[0].env: %d entries; at most %d", spec.MaxEnv+1, spec.MaxEnv),
		},
		{
			name: "env bytes",
			// 16 entries of 65,536 bytes each pass 1 MiB by 16 + the names.
			over: declWith(container(`"env": ` + jsonMap(16, envKey, func(int) string { return strings.Repeat("x", 65536) }))),
			at:   declWith(container(`"env": ` + jsonMap(15, envKey, func(int) string { return strings.Repeat("x", 65536) }))),
			want: fmt.Sprintf("bytes of names and values; at most %d per container", spec.MaxEnvBytes),
		},
		{
			name: "one env entry",
			over: declWith(container(`"env": {"BIG": "` + strings.Repeat("x", spec.MaxEnvEntryBytes-3) + `"}`)),
			at:   declWith(container(`"env": {"BIG": "` + strings.Repeat("x", spec.MaxEnvEntryBytes-4) + `"}`)),
			want: fmt.Sprintf("containers[0].env.BIG: %d bytes as NAME=VALUE; at most %d", spec.MaxEnvEntryBytes+1, spec.MaxEnvEntryBytes),
		},
		{
			name: "labels",
			over: declWith(container(`"labels": ` + jsonMap(spec.MaxLabels+1, word, word))),
			at:   declWith(container(`"labels": ` + jsonMap(spec.MaxLabels, word, word))),
			want: fmt.Sprintf("containers[0].labels: %d labels; at most %d", spec.MaxLabels+1, spec.MaxLabels),
		},
		{
			name: "label bytes",
			over: declWith(container(`"labels": ` + jsonMap(4, word, func(int) string { return strings.Repeat("x", 65536) }))),
			at:   declWith(container(`"labels": ` + jsonMap(3, word, func(int) string { return strings.Repeat("x", 65536) }))),
			want: fmt.Sprintf("bytes of keys and values; at most %d per container", spec.MaxLabelBytes),
		},
		{
			name: "ports",
			over: declWith(container(`"ports": [` + objects(spec.MaxPorts+1, func(i int) string { return fmt.Sprintf(`{"container_port": %d}`, i%60000+1) }) + `]`)),
			at:   declWith(container(`"ports": [` + objects(spec.MaxPorts, func(i int) string { return fmt.Sprintf(`{"container_port": %d}`, i%60000+1) }) + `]`)),
			want: fmt.Sprintf("containers[0].ports: %d ports; at most %d", spec.MaxPorts+1, spec.MaxPorts),
		},
		{
			name: "mounts",
			over: declWith(container(`"mounts": [` + objects(spec.MaxMounts+1, func(i int) string { return fmt.Sprintf(`{"type": "tmpfs", "target": "/t%d"}`, i) }) + `]`)),
			at:   declWith(container(`"mounts": [` + objects(spec.MaxMounts, func(i int) string { return fmt.Sprintf(`{"type": "tmpfs", "target": "/t%d"}`, i) }) + `]`)),
			want: fmt.Sprintf("containers[0].mounts: %d mounts; at most %d", spec.MaxMounts+1, spec.MaxMounts),
		},
		{
			name: "networks",
			over: declWith(container(`"networks": [` + objects(spec.MaxNetworks+1, func(i int) string { return fmt.Sprintf(`{"name": "n%d"}`, i) }) + `]`)),
			at:   declWith(container(`"networks": [` + objects(spec.MaxNetworks, func(i int) string { return fmt.Sprintf(`{"name": "n%d"}`, i) }) + `]`)),
			want: fmt.Sprintf("containers[0].networks: %d networks; at most %d", spec.MaxNetworks+1, spec.MaxNetworks),
		},
		{
			name: "aliases",
			over: declWith(container(`"networks": [{"name": "mesh", "aliases": [` + jsonList(spec.MaxAliases+1, word) + `]}]`)),
			at:   declWith(container(`"networks": [{"name": "mesh", "aliases": [` + jsonList(spec.MaxAliases, word) + `]}]`)),
			want: fmt.Sprintf("containers[0].networks[0].aliases: %d aliases; at most %d", spec.MaxAliases+1, spec.MaxAliases),
		},
		{
			name: "cap_add",
			over: declWith(container(`"cap_add": [` + jsonList(spec.MaxCaps+1, func(int) string { return "NET_ADMIN" }) + `]`)),
			at:   declWith(container(`"cap_add": [` + jsonList(spec.MaxCaps, func(int) string { return "NET_ADMIN" }) + `]`)),
			want: fmt.Sprintf("containers[0].cap_add: %d capabilities; at most %d", spec.MaxCaps+1, spec.MaxCaps),
		},
		{
			name: "cap_drop",
			over: declWith(container(`"cap_drop": [` + jsonList(spec.MaxCaps+1, func(int) string { return "ALL" }) + `]`)),
			at:   declWith(container(`"cap_drop": [` + jsonList(spec.MaxCaps, func(int) string { return "ALL" }) + `]`)),
			want: fmt.Sprintf("containers[0].cap_drop: %d capabilities; at most %d", spec.MaxCaps+1, spec.MaxCaps),
		},
		{
			name: "depends_on",
			over: declWith(container(`"depends_on": [`+jsonList(spec.MaxDependsOn+1, func(int) string { return "db" })+`]`), `{"name": "db", "image": "b"}`),
			want: fmt.Sprintf("containers[0].depends_on: %d names; at most %d", spec.MaxDependsOn+1, spec.MaxDependsOn),
		},
		{
			name:     "addresses of a name",
			over:     `{"generation": 1, "names": {"a.internal": [` + manyAddrs(spec.MaxAddrsPerName+1) + `]}}`,
			at:       `{"generation": 1, "names": {"a.internal": [` + manyAddrs(spec.MaxAddrsPerName) + `]}}`,
			want:     fmt.Sprintf(`names["a.internal"]: has %d addresses; at most %d`, spec.MaxAddrsPerName+1, spec.MaxAddrsPerName),
			isRoster: true,
		},
		{
			name:     "document size",
			over:     `{"generation": 1, "names": {}}` + strings.Repeat(" ", spec.MaxDocumentBytes-29),
			want:     fmt.Sprintf("the document is %d bytes; at most %d", spec.MaxDocumentBytes+1, spec.MaxDocumentBytes),
			isRoster: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parse := func(doc string) error {
				if tt.isRoster {
					_, err := specjson.ParseRoster([]byte(doc))
					return err
				}
				_, err := specjson.ParseDeclaration([]byte(doc))
				return err
			}
			err := parse(tt.over)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("one past the limit: error %.300v, want it to contain %q", err, tt.want)
			}
			if err != nil && len(err.Error()) > 2000 {
				t.Errorf("the refusal is %d bytes long: one fault per entry buries the one that matters", len(err.Error()))
			}
			if tt.at == "" {
				return
			}
			if err := parse(tt.at); err != nil {
				t.Errorf("at the limit: %.300v, want it accepted", err)
			}
		})
	}
	t.Run("document size of a declaration", func(t *testing.T) {
		doc := declWith() + strings.Repeat(" ", spec.MaxDocumentBytes)
		_, err := specjson.ParseDeclaration([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", spec.MaxDocumentBytes)) {
			t.Errorf("ParseDeclaration(%d bytes) = %.300v, want the size refused", len(doc), err)
		}
	})
}

// TestLargeRosterWithinLimits: a 100,000-name roster, ten times the
// incident's mesh, is far inside every limit, in a declaration and alone.
func TestLargeRosterWithinLimits(t *testing.T) {
	doc := rosterOf(100_000)
	if len(doc) > spec.MaxDocumentBytes/8 {
		t.Errorf("a 100,000-name roster is %d bytes, within a factor 8 of MaxDocumentBytes", len(doc))
	}
	r, err := specjson.ParseRoster([]byte(doc))
	if err != nil || len(r.Names) != 100_000 {
		t.Fatalf("ParseRoster(100,000 names) = %v", err)
	}
	d, err := specjson.ParseDeclaration([]byte(`{"schema": 1, "machine": "ace", "generation": 1, "roster": ` + doc + `, "containers": []}`))
	if err != nil || len(d.Roster.Names) != 100_000 {
		t.Fatalf("ParseDeclaration(100,000 names) = %v", err)
	}
}

// rosterOf is a roster document of n names, one address each.
func rosterOf(n int) string {
	var b strings.Builder
	b.WriteString(`{"generation": 1, "zones": ["internal"], "names": {`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"n%d.internal": ["10.%d.%d.%d"]`, i, i>>16&255, i>>8&255, i&255)
	}
	b.WriteString("}}")
	return b.String()
}

// TestRosterNamesLimit: a roster of more than spec.MaxNames names is
// refused by both readers, the fast one declining it to the strict one,
// which names the limit.
func TestRosterNamesLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a million-name roster takes seconds")
	}
	_, err := specjson.ParseRoster([]byte(rosterOf(spec.MaxNames + 1)))
	want := fmt.Sprintf("names: more than %d names; at most %d", spec.MaxNames, spec.MaxNames)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ParseRoster(%d names) = %.300v, want %q", spec.MaxNames+1, err, want)
	}
}
