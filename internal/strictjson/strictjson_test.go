package strictjson

import (
	"strings"
	"testing"
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
