package strictjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFaults(t *testing.T) {
	tests := []struct{ doc, want string }{
		{`{"a": 1, "a": 2}`, `a: key appears twice`},
		{`{"a": {"b": [1, {"c": 1, "c": 2}]}}`, `a.b[1].c: key appears twice`},
		{`{"a b": {"x": 1, "x": 1}}`, `["a b"].x: key appears twice`},
		{`{"a": 1} {}`, `unexpected data after the top-level value`},
		{`{"a": `, `not valid JSON`},
		{strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2), `nested deeper than 64 levels`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%.40s) = %v, want an error containing %q", tt.doc, err, tt.want)
		}
	}
}

func TestObjectReportsUnknownAndWrongTypes(t *testing.T) {
	v, err := Parse([]byte(`{"name": 7, "extra": true, "n": 1.5}`))
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	o := rep.Object("c", v)
	nv, p, _ := o.Required("name")
	rep.String(p, nv)
	iv, p, _ := o.Field("n")
	rep.Int(p, iv, 0, 10)
	o.Required("image")
	o.Done()
	var got []string
	for _, f := range rep.Faults {
		got = append(got, f.Path+": "+f.Reason)
	}
	want := []string{
		"c.name: is a number, want a string",
		"c.n: 1.5 is not a whole number",
		"c.image: is required",
		"c.extra: unknown field; known fields here: image, n, name",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("faults:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// toAny converts a Value to what encoding/json decodes (with UseNumber).
func toAny(v Value) any {
	switch v.Kind {
	case KindBool:
		return v.Bool
	case KindNumber:
		return v.Number
	case KindString:
		return v.String
	case KindArray:
		out := make([]any, len(v.Items))
		for i, item := range v.Items {
			out[i] = toAny(item)
		}
		return out
	case KindObject:
		out := map[string]any{}
		for _, m := range v.Members {
			out[m.Key] = toAny(m.Value)
		}
		return out
	}
	return nil
}

// FuzzParse checks the scanner against encoding/json: whatever Parse
// accepts is valid JSON and reads the same; whatever it refuses as a
// syntax error, encoding/json refuses too.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"a": [1, -2.5e+3, "x\u00e9\n", true, false, null], "b": {}}`,
		`[]`, `""`, `"\ud83d\ude00"`, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
		"\"\xff\"", `01`, `1.`, `-`, `{"a" 1}`, `[1,]`, `tru`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err != nil {
			if strings.Contains(err.Error(), "not valid JSON") || strings.Contains(err.Error(), "unexpected data after") {
				if json.Valid(data) {
					t.Fatalf("Parse refused valid JSON %q: %v", data, err)
				}
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Parse accepted invalid JSON %q", data)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if diff := cmp.Diff(want, toAny(v)); diff != "" {
			t.Fatalf("Parse(%q) differs from encoding/json (-json +Parse):\n%s", data, diff)
		}
	})
}
