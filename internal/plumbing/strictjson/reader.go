package strictjson

import (
	"fmt"
	"slices"
	"strings"
)

// Fault is one problem at one path of a document.
type Fault struct {
	Path   string
	Reason string
}

// Report collects the faults found while reading a document.
type Report struct {
	Faults []Fault
}

// Add records a fault at path.
func (r *Report) Add(path, format string, args ...any) {
	r.Faults = append(r.Faults, Fault{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// Object reads v as an object at path; a non-object is a fault and yields an
// empty object, so that reading can go on and report more.
func (r *Report) Object(path string, v Value) *Object {
	o := &Object{path: path, report: r, used: map[string]bool{}}
	if v.Kind != KindObject {
		r.Add(orRoot(path), "is %s, want an object", v.Kind)
		return o
	}
	o.members = v.Members
	return o
}

// Object is an object being read; Done reports the keys nobody asked for.
type Object struct {
	path    string
	members []Member
	used    map[string]bool
	report  *Report
}

// Field returns the member named key and its path, marking it known.
func (o *Object) Field(key string) (v Value, path string, ok bool) {
	o.used[key] = true
	for _, m := range o.members {
		if m.Key == key {
			return m.Value, Join(o.path, key), true
		}
	}
	return Value{}, Join(o.path, key), false
}

// Required is Field, with a fault when the key is missing.
func (o *Object) Required(key string) (Value, string, bool) {
	v, path, ok := o.Field(key)
	if !ok {
		o.report.Add(path, "is required")
	}
	return v, path, ok
}

// Done reports every member that no Field call asked for.
func (o *Object) Done(known ...string) {
	for _, m := range o.members {
		if !o.used[m.Key] {
			names := make([]string, 0, len(o.used))
			for k := range o.used {
				names = append(names, k)
			}
			slices.Sort(names)
			o.report.Add(Join(o.path, m.Key), "unknown field; known fields here: %s", strings.Join(names, ", "))
		}
	}
}

// Members returns the object's members in document order, marking them all
// known (for objects that are maps, such as env or labels).
func (o *Object) Members() []Member {
	for _, m := range o.members {
		o.used[m.Key] = true
	}
	return o.members
}

// String reads v as a string, reporting a fault otherwise.
func (r *Report) String(path string, v Value) (string, bool) {
	if v.Kind != KindString {
		r.Add(path, "is %s, want a string", v.Kind)
		return "", false
	}
	return v.String, true
}

// Bool reads v as a boolean.
func (r *Report) Bool(path string, v Value) (bool, bool) {
	if v.Kind != KindBool {
		r.Add(path, "is %s, want true or false", v.Kind)
		return false, false
	}
	return v.Bool, true
}

// Int reads v as an integer within [min, max].
func (r *Report) Int(path string, v Value, min, max int64) (int64, bool) {
	if v.Kind != KindNumber {
		r.Add(path, "is %s, want a whole number", v.Kind)
		return 0, false
	}
	n, err := v.Number.Int64()
	if err != nil {
		r.Add(path, "%s is not a whole number", v.Number)
		return 0, false
	}
	if n < min || n > max {
		r.Add(path, "%d is out of range [%d, %d]", n, min, max)
		return 0, false
	}
	return n, true
}

// Uint reads v as an unsigned integer within [min, max].
func (r *Report) Uint(path string, v Value, min, max uint64) (uint64, bool) {
	if v.Kind != KindNumber {
		r.Add(path, "is %s, want a whole number", v.Kind)
		return 0, false
	}
	var n uint64
	if _, err := fmt.Sscan(v.Number.String(), &n); err != nil || fmt.Sprint(n) != v.Number.String() {
		r.Add(path, "%s is not a whole number >= 0", v.Number)
		return 0, false
	}
	if n < min || n > max {
		r.Add(path, "%d is out of range [%d, %d]", n, min, max)
		return 0, false
	}
	return n, true
}

// Strings reads v as an array of strings.
func (r *Report) Strings(path string, v Value) ([]string, bool) {
	if v.Kind != KindArray {
		r.Add(path, "is %s, want an array of strings", v.Kind)
		return nil, false
	}
	out := make([]string, 0, len(v.Items))
	ok := true
	for i, item := range v.Items {
		s, good := r.String(Index(path, i), item)
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// Array reads v as an array.
func (r *Report) Array(path string, v Value) ([]Value, bool) {
	if v.Kind != KindArray {
		r.Add(path, "is %s, want an array", v.Kind)
		return nil, false
	}
	return v.Items, true
}
