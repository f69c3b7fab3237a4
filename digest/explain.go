package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Change is one field that differs between two renderings of a container.
//
// The values of fields that may hold secrets (env, labels:
// spec.SecretValues) are not in it: their entries name the key and a short
// hash of each value (`env: ~DB_PASSWORD (3f2a→9c1d)`), so that a Change
// can be logged, journaled and printed anywhere. WithValues returns the
// same Change with the values, for a person who asked for them.
type Change struct {
	Field      string          `json:"field"`      // the declaration's name for it: "image", "hosts", "env"
	Mutability spec.Mutability `json:"mutability"` // Replace, or UpdateInPlace
	// Old and New are the whole values, as text ("" when unset); empty for
	// maps (env, labels), whose entries say what changed.
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
	// Added are the list entries, or map keys, only in New; Removed those
	// only in Old; Changed the map keys in both with another value.
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed []string `json:"changed,omitempty"`

	// values is this Change with the values of a secret field, nil when
	// the Change shows its values already.
	values *Change
}

// HashLen is the length of the value hashes a Change shows for a secret
// field's entries: hex digits of the value's SHA-256, enough to tell a
// value changed, and too few to recover it.
const HashLen = 4

// ValueHash is the short hash a Change shows for a secret value v.
func ValueHash(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])[:HashLen]
}

// WithValues returns c showing the values of a secret field's entries too
// (`env: ~DB_PASSWORD=old→new`), for `meshhost plan --show-values`; c
// itself for any other field.
func (c Change) WithValues() Change {
	if c.values == nil {
		return c
	}
	return *c.values
}

// String reads as an operator would write it:
//
//	image: a:1 -> a:2
//	hosts: +searxng.zurag.be=100.64.0.9
//	env: +LOG (77aa) -OLD (3f2a) ~DB_PASSWORD (3f2a→9c1d)
func (c Change) String() string {
	if len(c.Added)+len(c.Removed)+len(c.Changed) > 0 {
		parts := make([]string, 0, len(c.Added)+len(c.Removed)+len(c.Changed))
		for _, a := range c.Added {
			parts = append(parts, "+"+a)
		}
		for _, r := range c.Removed {
			parts = append(parts, "-"+r)
		}
		for _, ch := range c.Changed {
			parts = append(parts, "~"+ch)
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
	c := Change{Field: name, Mutability: mut}
	switch old.Kind() {
	case reflect.Map:
		// Entries by key; values hashed when they may be secrets, and
		// shown only by WithValues.
		secret := spec.SecretValues(name)
		v := Change{Field: name, Mutability: mut}
		for _, k := range sortedMapKeys(old, new) {
			ov, inOld := lookup(old, k)
			nv, inNew := lookup(new, k)
			switch {
			case !inOld:
				c.Added = append(c.Added, entry(k, nv, secret))
				v.Added = append(v.Added, k+"="+nv)
			case !inNew:
				c.Removed = append(c.Removed, entry(k, ov, secret))
				v.Removed = append(v.Removed, k+"="+ov)
			case ov != nv:
				if secret {
					c.Changed = append(c.Changed, fmt.Sprintf("%s (%s→%s)", k, ValueHash(ov), ValueHash(nv)))
				} else {
					c.Changed = append(c.Changed, fmt.Sprintf("%s=%s→%s", k, ov, nv))
				}
				v.Changed = append(v.Changed, fmt.Sprintf("%s=%s→%s", k, ov, nv))
			}
		}
		if secret {
			c.values = &v
		}
		return c
	case reflect.Slice:
		c.Old, c.New = text(old), text(new)
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
	default:
		c.Old, c.New = text(old), text(new)
	}
	return c
}

// entry is a map entry as a Change shows it: KEY=VALUE, or, for a secret
// field, KEY (hash).
func entry(k, v string, secret bool) string {
	if secret {
		return fmt.Sprintf("%s (%s)", k, ValueHash(v))
	}
	return k + "=" + v
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
