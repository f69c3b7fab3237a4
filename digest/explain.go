package digest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Change is one field that differs between two renderings of a container.
type Change struct {
	Field      string          // the declaration's name for it: "image", "hosts", "env"
	Mutability spec.Mutability // Replace, or UpdateInPlace
	Old, New   string          // whole values, as text ("" when unset)
	Added      []string        // for lists and maps: entries only in New
	Removed    []string        // entries only in Old
}

// String reads as an operator would write it:
//
//	image: a:1 -> a:2
//	hosts: +searxng.zurag.be=100.64.0.9
//	env: +LOG=debug -OLD=1
func (c Change) String() string {
	if len(c.Added)+len(c.Removed) > 0 {
		parts := make([]string, 0, len(c.Added)+len(c.Removed))
		for _, a := range c.Added {
			parts = append(parts, "+"+a)
		}
		for _, r := range c.Removed {
			parts = append(parts, "-"+r)
		}
		return c.Field + ": " + strings.Join(parts, " ")
	}
	return fmt.Sprintf("%s: %s -> %s", c.Field, orUnset(c.Old), orUnset(c.New))
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// Explain returns the fields that differ between old and new, in the order
// of the declaration, each with its old and new value. An empty result means
// nothing differs. It compares the same canonical form the digest hashes, so
// a field Explain is silent about never changes a digest.
func Explain(old, new spec.Rendered) []Change {
	a, b := reflect.ValueOf(toDocV1(old)), reflect.ValueOf(toDocV1(new))
	t := a.Type()
	var changes []Change
	for i := range t.NumField() {
		if reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			continue
		}
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		mut, _ := spec.MutabilityOf(name)
		changes = append(changes, describe(name, mut, a.Field(i), b.Field(i)))
	}
	return changes
}

func describe(name string, mut spec.Mutability, old, new reflect.Value) Change {
	c := Change{Field: name, Mutability: mut, Old: text(old), New: text(new)}
	switch old.Kind() {
	case reflect.Map:
		for _, k := range sortedMapKeys(old, new) {
			ov, inOld := lookup(old, k)
			nv, inNew := lookup(new, k)
			switch {
			case !inOld:
				c.Added = append(c.Added, k+"="+nv)
			case !inNew:
				c.Removed = append(c.Removed, k+"="+ov)
			case ov != nv:
				c.Removed = append(c.Removed, k+"="+ov)
				c.Added = append(c.Added, k+"="+nv)
			}
		}
	case reflect.Slice:
		// Lists whose entries are whole settings (hosts, ports, mounts, caps)
		// read best as a set difference; command-like lists as old -> new.
		if name == "command" || name == "entrypoint" {
			break
		}
		os, ns := strings_(old), strings_(new)
		for _, s := range ns {
			if !slices.Contains(os, s) {
				c.Added = append(c.Added, s)
			}
		}
		for _, s := range os {
			if !slices.Contains(ns, s) {
				c.Removed = append(c.Removed, s)
			}
		}
		if len(c.Added)+len(c.Removed) == 0 { // same entries, new order
			c.Added, c.Removed = nil, nil
		}
	}
	return c
}

func strings_(v reflect.Value) []string {
	s, _ := v.Interface().([]string)
	return s
}

func lookup(m reflect.Value, k string) (string, bool) {
	if m.IsNil() {
		return "", false
	}
	v := m.MapIndex(reflect.ValueOf(k))
	if !v.IsValid() {
		return "", false
	}
	return v.String(), true
}

func sortedMapKeys(a, b reflect.Value) []string {
	var keys []string
	for _, m := range []reflect.Value{a, b} {
		for _, k := range m.MapKeys() {
			keys = append(keys, k.String())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// text renders a field value for Old and New: scalars plainly, the rest as
// compact JSON.
func text(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int64:
		if v.Int() == 0 {
			return ""
		}
		return fmt.Sprint(v.Int())
	case reflect.Pointer:
		if v.IsNil() {
			return ""
		}
	case reflect.Map, reflect.Slice:
		if v.Len() == 0 {
			return ""
		}
	}
	b, _ := json.Marshal(v.Interface())
	return string(b)
}
