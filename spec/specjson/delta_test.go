package specjson_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

var cmpAddr = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestParseRosterDelta(t *testing.T) {
	d, err := specjson.ParseRosterDelta([]byte(`{"from": 7, "generation": 8,
	  "set": {"New.Novox.internal.": ["fd7a::9", "10.89.0.9"], "gitea.novox.internal": ["10.89.0.8"]},
	  "remove": ["Old.novox.internal", "aaa.internal"]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &spec.RosterDelta{From: 7, To: 8,
		Set: map[string][]netip.Addr{
			"new.novox.internal":   {netip.MustParseAddr("10.89.0.9"), netip.MustParseAddr("fd7a::9")},
			"gitea.novox.internal": {netip.MustParseAddr("10.89.0.8")},
		},
		Remove: []string{"aaa.internal", "old.novox.internal"}}
	if diff := cmp.Diff(want, d, cmpAddr); diff != "" {
		t.Fatalf("ParseRosterDelta (-want +got):\n%s", diff)
	}
	for _, d := range []*spec.RosterDelta{want, {From: 1, To: 2, Zones: []string{}, Set: map[string][]netip.Addr{}}, {From: 0, To: 1, Zones: []string{"internal"}, Set: map[string][]netip.Addr{}}} {
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := specjson.ParseRosterDelta(out)
		if err != nil {
			t.Fatalf("ParseRosterDelta(%s) = %v", out, err)
		}
		if diff := cmp.Diff(d, back, cmpAddr); diff != "" {
			t.Errorf("round trip of %s (-want +got):\n%s", out, diff)
		}
	}
}

func TestParseRosterDeltaFaults(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"generation": 8}`, `from: is required`},
		{`{"from": 8, "generation": 8}`, `generation: 8 is not after from 8`},
		{`{"from": 7, "generation": 8, "set": {"a.internal": "10.0.0.1"}}`, `set["a.internal"]: is a string, want an array of strings`},
		{`{"from": 7, "generation": 8, "set": {"a.internal": ["10.0.0.x"]}}`, `set["a.internal"][0]: "10.0.0.x" is not an IP address`},
		{`{"from": 7, "generation": 8, "set": {"a..internal": ["10.0.0.1"]}}`, `set["a..internal"]: not a valid host name`},
		{`{"from": 7, "generation": 8, "remove": ["a.internal"], "set": {"A.internal": ["10.0.0.1"]}}`, `either set or removed`},
		{`{"from": 7, "generation": 8, "names": {}}`, `names: unknown field`},
		{`{"from": 7, "generation": 8, "set": {"a.internal": ["10.0.0.1"], "a.internal": ["10.0.0.2"]}}`, `set["a.internal"]: key appears twice`},
	} {
		_, err := specjson.ParseRosterDelta([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRosterDelta(%s) = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestParseDeclarationDelta(t *testing.T) {
	doc := `{"schema": 1, "machine": "novox", "generation": 43,
	  "roster_delta": {"from": 7, "generation": 8, "set": {"new.novox.internal": ["10.89.0.9"]}}}`
	if !specjson.IsDeclarationDelta([]byte(doc)) {
		t.Error("IsDeclarationDelta = false for a declaration delta")
	}
	d, err := specjson.ParseDeclarationDelta([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &spec.DeclarationDelta{Schema: 1, Machine: "novox", Generation: 43, Roster: &spec.RosterDelta{From: 7, To: 8,
		Set: map[string][]netip.Addr{"new.novox.internal": {netip.MustParseAddr("10.89.0.9")}}}}
	if diff := cmp.Diff(want, d, cmpAddr); diff != "" {
		t.Fatalf("ParseDeclarationDelta (-want +got):\n%s", diff)
	}
	out, _ := json.Marshal(d)
	back, err := specjson.ParseDeclarationDelta(out)
	if err != nil || !cmp.Equal(d, back, cmpAddr) {
		t.Errorf("round trip of %s = %+v, %v", out, back, err)
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"schema": 1, "machine": "novox", "generation": 43}`, `roster_delta: is required`},
		{`{"schema": 1, "machine": "Novox", "generation": 0, "roster_delta": {"from": 7, "generation": 8}}`, `machine: "Novox" is not a machine name`},
		{`{"schema": 1, "machine": "novox", "generation": 43, "containers": [], "roster_delta": {"from": 7, "generation": 8}}`, `containers: unknown field`},
		{`{"schema": 1, "machine": "novox", "generation": 43, "roster_delta": {"from": 7, "generation": 8, "set": {"-a.internal": ["10.0.0.1"]}}}`, `roster_delta.set["-a.internal"]: not a valid host name`},
	} {
		if _, err := specjson.ParseDeclarationDelta([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseDeclarationDelta(%s) = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestIsDeclarationDelta(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"schema": 1, "roster_delta": {}}`:                     true,
		`{"containers": [{"roster": 1}], "roster_delta": null}`: true,
		`{"schema": 1, "roster": {"names": {}}}`:                false,
		`{"roster": {}, "roster_delta": {}}`:                    false, // a whole declaration (the reader refuses the extra key)
		`[]`:                                                    false,
		`{"schema": 1}`:                                         false,
	} {
		if got := specjson.IsDeclarationDelta([]byte(doc)); got != want {
			t.Errorf("IsDeclarationDelta(%s) = %v, want %v", doc, got, want)
		}
	}
}

// FuzzParseRosterDelta: whatever the reader takes is valid and normalized,
// and reads back the same from what MarshalJSON writes.
func FuzzParseRosterDelta(f *testing.F) {
	f.Add([]byte(`{"from": 7, "generation": 8, "zones": ["Internal"], "set": {"A.internal": ["fd7a::9", "10.0.0.1"]}, "remove": ["b.internal"]}`))
	f.Add([]byte(`{"from": 0, "generation": 1, "zones": []}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := specjson.ParseRosterDelta(data)
		if err != nil {
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("ParseRosterDelta took an invalid delta: %v", err)
		}
		if diff := cmp.Diff(d.Normalize(), d, cmpAddr); diff != "" {
			t.Fatalf("ParseRosterDelta's delta is not normalized (-normalized +got):\n%s", diff)
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := specjson.ParseRosterDelta(out)
		if err != nil {
			t.Fatalf("ParseRosterDelta(MarshalJSON) = %v for %s", err, out)
		}
		if diff := cmp.Diff(d, back, cmpAddr); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}
