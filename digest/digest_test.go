package digest

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json with the digests computed now")

// testKey is a fixed key, so that failures read the same every run.
var testKey, _ = NewKey([]byte("meshhost digest tests' fixed key"))

func mustRender(t testing.TB, c spec.Container, r *spec.Roster, m spec.Mode) spec.Rendered {
	t.Helper()
	out, err := spec.Render(c, r, m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func testRoster(n int) *spec.Roster {
	r := &spec.Roster{Generation: 1, Zones: []string{"internal"}, Names: map[string][]netip.Addr{}}
	for i := range n {
		r.Names[fmt.Sprintf("svc%d.node%d.internal", i, i%5)] = []netip.Addr{
			netip.AddrFrom4([4]byte{10, 89, byte(i / 250), byte(i%250 + 1)}),
		}
	}
	return r
}

var resolveMode = spec.Mode{Names: spec.Resolve, DNS: spec.DNSConfig{
	Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}, Search: []string{"internal"}, Options: []string{"ndots:1"},
}}

// typical is a container with every kind of field set (about 30 settings).
func typical() spec.Container {
	return spec.Container{
		Name: "gitea", Image: "docker.io/gitea/gitea:1.22",
		Command: []string{"/usr/bin/entrypoint", "web"}, Entrypoint: []string{"/sbin/tini", "--"},
		Env:        map[string]string{"USER_UID": "1000", "USER_GID": "1000", "GITEA__database__DB_TYPE": "postgres", "GITEA__database__HOST": "postgres.novox.internal:5432"},
		WorkingDir: "/data", User: "1000:1000",
		Labels:   map[string]string{"team": "core", "tier": "app"},
		Ports:    []spec.Port{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 3000, ContainerPort: 3000}, {HostPort: 2222, ContainerPort: 22}},
		Mounts:   []spec.Mount{{Type: spec.MountVolume, Source: "gitea-data", Target: "/data"}, {Type: spec.MountBind, Source: "/etc/localtime", Target: "/etc/localtime", ReadOnly: true}},
		Networks: []spec.NetworkAttachment{{Name: "mesh", Aliases: []string{"git"}, IPv4: netip.MustParseAddr("10.89.0.7")}},
		Restart:  spec.RestartPolicy{Name: "on-failure", MaxRetries: 5}, StopSignal: "SIGINT", StopTimeout: 30 * time.Second,
		Healthcheck: &spec.Healthcheck{Test: []string{"curl", "-f", "http://localhost:3000"}, Interval: 10 * time.Second},
		Resources:   spec.Resources{MemoryBytes: 512 << 20, MilliCPUs: 1500, PidsLimit: 256},
		CapAdd:      []string{"NET_BIND_SERVICE"}, CapDrop: []string{"NET_RAW"},
		DependsOn: []string{"postgres"},
	}
}

// golden cases: their digests must never change by accident.
func goldenCases(t testing.TB) map[string]spec.Rendered {
	return map[string]spec.Rendered{
		"minimal-copy":    mustRender(t, spec.Container{Name: "a", Image: "busybox"}, testRoster(3), spec.Mode{Names: spec.Copy}),
		"minimal-resolve": mustRender(t, spec.Container{Name: "a", Image: "busybox"}, nil, resolveMode),
		"typical-copy":    mustRender(t, typical(), testRoster(50), spec.Mode{Names: spec.Copy}),
		"typical-resolve": mustRender(t, typical(), nil, resolveMode),
	}
}

func TestGolden(t *testing.T) {
	path := filepath.Join("testdata", "golden.json")
	got := map[string]string{}
	for name, r := range goldenCases(t) {
		got[name] = Of(r)
	}
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./digest -update once to create it)", err)
	}
	var want map[string]string
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("digests changed (-golden +now):\n%s\nA changed digest replaces every running container labelled with it. "+
			"If the change is intended, add a new digest version instead of changing %s.", diff, Current)
	}
}

func TestDigestIgnoresWhatCarriesNoMeaning(t *testing.T) {
	base := typical()
	same := typical()
	// Other map and list orders, explicit defaults, meshhost's own labels,
	// depends_on and resources (updated in place) must not move the digest.
	same.Ports[0], same.Ports[1] = same.Ports[1], same.Ports[0]
	same.Mounts[0], same.Mounts[1] = same.Mounts[1], same.Mounts[0]
	same.Labels = map[string]string{"tier": "app", "team": "core", spec.LabelPrefix + "managed": "true"}
	same.CapDrop = []string{"cap_net_raw", "NET_RAW"}
	same.Healthcheck = &spec.Healthcheck{Test: base.Healthcheck.Test, Interval: 10 * time.Second, Timeout: spec.DefaultHealthTimeout, Retries: spec.DefaultHealthRetries}
	same.DependsOn = nil
	same.Resources = spec.Resources{MemoryBytes: 1 << 30}
	for _, m := range []spec.Mode{{Names: spec.Copy}, resolveMode} {
		a, b := Of(mustRender(t, base, testRoster(10), m)), Of(mustRender(t, same, testRoster(10), m))
		if a != b {
			t.Errorf("%s: digest moved for a change that carries no meaning: %s -> %s\n%v", m.Names, a, b,
				testKey.Explain(mustRender(t, base, testRoster(10), m), mustRender(t, same, testRoster(10), m)))
		}
	}
	nilEnv := spec.Container{Name: "a", Image: "i"}
	emptyEnv := spec.Container{Name: "a", Image: "i", Env: map[string]string{}, Labels: map[string]string{}, CapAdd: []string{}}
	if Of(mustRender(t, nilEnv, nil, resolveMode)) != Of(mustRender(t, emptyEnv, nil, resolveMode)) {
		t.Error("nil and empty maps digest differently")
	}
}

func TestRosterInDigestOnlyInCopyMode(t *testing.T) {
	c := typical()
	small, big := testRoster(50), testRoster(51)
	if Of(mustRender(t, c, small, resolveMode)) != Of(mustRender(t, c, big, resolveMode)) {
		t.Error("resolve mode: a roster change moved the digest")
	}
	oldR, newR := mustRender(t, c, small, spec.Mode{Names: spec.Copy}), mustRender(t, c, big, spec.Mode{Names: spec.Copy})
	if Of(oldR) == Of(newR) {
		t.Error("copy mode: a roster change did not move the digest")
	}
	changes := testKey.Explain(oldR, newR)
	if len(changes) != 1 || changes[0].String() != "hosts: +svc50.node0.internal=10.89.0.51" {
		t.Errorf("Explain = %v, want [hosts: +svc50.node0.internal=10.89.0.51]", changes)
	}
}

func TestExplain(t *testing.T) {
	a := typical()
	b := typical()
	b.Image = "docker.io/gitea/gitea:1.23"
	b.Env = map[string]string{"USER_UID": "1001", "USER_GID": "1000", "GITEA__database__DB_TYPE": "postgres", "GITEA__database__HOST": "postgres.novox.internal:5432", "LOG": "debug"}
	b.Resources.MemoryBytes = 1 << 30
	b.StopTimeout = 2 * time.Minute
	got := []string{}
	for _, c := range testKey.Explain(mustRender(t, a, nil, resolveMode), mustRender(t, b, nil, resolveMode)) {
		got = append(got, c.String()+" ["+string(c.Mutability)+"]")
	}
	want := []string{
		"image: docker.io/gitea/gitea:1.22 -> docker.io/gitea/gitea:1.23 [replace]",
		"env: +LOG (" + testKey.ValueHash("debug") + ") ~USER_UID (" + testKey.ValueHash("1000") + "→" + testKey.ValueHash("1001") + ") [replace]",
		"stop_timeout: 30 -> 120 [replace]",
		`resources: {"memory_bytes":536870912,"millicpus":1500,"pids":256} -> {"memory_bytes":1073741824,"millicpus":1500,"pids":256} [update]`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Explain (-want +got):\n%s", diff)
	}
	got = got[:0]
	for _, c := range testKey.Explain(mustRender(t, a, nil, resolveMode), mustRender(t, b, nil, resolveMode)) {
		got = append(got, c.WithValues().String())
	}
	want = []string{
		"image: docker.io/gitea/gitea:1.22 -> docker.io/gitea/gitea:1.23",
		"env: +LOG=debug ~USER_UID=1000→1001",
		"stop_timeout: 30 -> 120",
		`resources: {"memory_bytes":536870912,"millicpus":1500,"pids":256} -> {"memory_bytes":1073741824,"millicpus":1500,"pids":256}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Explain, WithValues (-want +got):\n%s", diff)
	}
	if n := testKey.Explain(mustRender(t, a, nil, resolveMode), mustRender(t, a, nil, resolveMode)); len(n) != 0 {
		t.Errorf("testKey.Explain(same, same) = %v, want nothing", n)
	}
}

// TestRecordRoundTrip: a record reads back as the settings it was made
// from, env and label values as their keyed hashes, and ExplainRecord finds
// nothing changed; a record of the first form (values in clear) does too.
func TestRecordRoundTrip(t *testing.T) {
	for name, r := range goldenCases(t) {
		for form, record := range map[string]string{"keyed": testKey.Record(r), "first form": clearRecord(r)} {
			back, err := ParseRecord(record)
			if err != nil {
				t.Fatalf("%s, %s: ParseRecord = %v", name, form, err)
			}
			if changes, err := testKey.ExplainRecord(record, r); len(changes) != 0 || err != nil {
				t.Errorf("%s, %s: ExplainRecord(Record(r), r) = %v, %v; want nothing", name, form, changes, err)
			}
			want := r
			if form == "keyed" {
				want.Env, want.Labels = testKey.sums(r.Env), testKey.sums(userLabels(r.Labels))
			}
			if changes := testKey.Explain(want, back); len(changes) != 0 {
				t.Errorf("%s, %s: record round trip changed %v", name, form, changes)
			}
		}
	}
}

// clearRecord is the record label of r as meshhost wrote it before keyed
// records: env and label values in clear.
func clearRecord(r spec.Rendered) string {
	b, err := json.Marshal(toDocV1(r))
	if err != nil {
		panic(err)
	}
	return "v1:" + string(b)
}

// TestUpgradeNeverReplaces simulates a meshhost that introduces digest v3
// with a new field: containers labelled v1 are judged by v1 and still match.
func TestUpgradeNeverReplaces(t *testing.T) {
	r := mustRender(t, typical(), testRoster(5), spec.Mode{Names: spec.Copy})
	v1Label := Of(r)

	versions["v3"] = version{
		canonical: func(r spec.Rendered) []byte {
			return append(canonicalV1(r), []byte(`{"new_field":"default"}`)...)
		},
		represents:  func(spec.Rendered) bool { return true },
		record:      recordV1,
		parseRecord: parseRecordV1,
	}
	defer delete(versions, "v3")
	if of("v3", r) == v1Label {
		t.Fatal("test is broken: v3 digests equal v1 digests")
	}

	if ok, err := Matches(v1Label, r); !ok || err != nil {
		t.Errorf("Matches(v1 label, same settings) under v3 = %v, %v; want true", ok, err)
	}
	changed := r
	changed.Image = "other"
	if ok, _ := Matches(v1Label, changed); ok {
		t.Error("Matches(v1 label, changed image) = true; want false")
	}
	if _, err := Matches("v9:sha256:00", r); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("Matches(v9) error = %v, want ErrUnsupportedVersion", err)
	}
	if _, err := Matches("garbage", r); err == nil {
		t.Error("Matches(garbage) error = nil")
	}
}

func TestDigestFormat(t *testing.T) {
	d := Of(mustRender(t, typical(), nil, resolveMode))
	if !strings.HasPrefix(d, "v1:sha256:") || len(d) != len("v1:sha256:")+64 {
		t.Errorf("Of = %q, want v1:sha256:<64 hex>", d)
	}
}

func FuzzCanonical(f *testing.F) {
	f.Add("gitea", "img:1", "A=1,B=2", "svc.internal=10.0.0.1", true)
	f.Add("", "", "", "", false)
	f.Fuzz(func(t *testing.T, name, image, env, hosts string, copyMode bool) {
		// Declarations are JSON, so their strings are always valid UTF-8;
		// the canonical encoding relies on that.
		for _, s := range []string{name, image, env} {
			if !utf8.ValidString(s) {
				t.Skip("not valid UTF-8")
			}
		}
		c := spec.Container{Name: name, Image: image, Env: map[string]string{}}
		for kv := range strings.SplitSeq(env, ",") {
			k, v, _ := strings.Cut(kv, "=")
			c.Env[k] = v
		}
		r := &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}}
		for kv := range strings.SplitSeq(hosts, ",") {
			n, a, _ := strings.Cut(kv, "=")
			if addr, err := netip.ParseAddr(a); err == nil {
				r.Names[n] = append(r.Names[n], addr)
			}
		}
		m := resolveMode
		if copyMode {
			m = spec.Mode{Names: spec.Copy}
		}
		rendered, err := spec.Render(c, r, m)
		if err != nil {
			return
		}
		d := Of(rendered)
		if d != Of(rendered) {
			t.Fatal("digest is not deterministic")
		}
		record := testKey.Record(rendered)
		if _, err := ParseRecord(record); err != nil {
			// Strings the record cannot carry must never have rendered.
			t.Fatalf("ParseRecord(Record(r)) = %v", err)
		}
		if changes, err := testKey.ExplainRecord(record, rendered); len(changes) != 0 || err != nil {
			t.Fatalf("ExplainRecord(Record(r), r) = %v, %v; want nothing", changes, err)
		}
		if back, err := ParseRecord(clearRecord(rendered)); err != nil {
			t.Fatalf("ParseRecord(first form) = %v", err)
		} else if ok, err := Matches(d, back); !ok || err != nil {
			t.Fatalf("first-form record round trip changed the digest: %v %v\n%v", ok, err, testKey.Explain(rendered, back))
		}
	})
}

func BenchmarkOfCopyMode(b *testing.B) {
	r := mustRender(b, typical(), testRoster(50), spec.Mode{Names: spec.Copy})
	b.ReportAllocs()
	for b.Loop() {
		_ = Of(r)
	}
}

func BenchmarkRenderAndDigestCopyMode(b *testing.B) {
	c, roster := typical(), testRoster(50)
	b.ReportAllocs()
	for b.Loop() {
		r, _ := spec.Render(c, roster, spec.Mode{Names: spec.Copy})
		_ = Of(r)
	}
}
