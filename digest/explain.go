package digest

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Change is one field that differs between two renderings of a container.
//
// The values of fields that may hold secrets (env, labels:
// spec.SecretValues) are not in it: their entries name the key and a short
// keyed hash of each value (`env: ~DB_PASSWORD (3f2a→9c1d)`, Key.ValueHash),
// so that a Change can be logged, journaled and printed anywhere. WithValues
// returns the same Change with the values it knows, for a person who asked
// for them.
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

// WithValues returns c showing the values of a secret field's entries too
// (`env: ~DB_PASSWORD=old→new`), for `meshhost plan --show-values`; c
// itself for any other field. A value known only by its keyed hash (the old
// value, from a keyed record) shows as that hash: `~DB_PASSWORD=(3f2a)→new`.
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
// of the declaration, each with its old and new value (the values of secret
// fields hashed with k). An empty result means nothing differs. It compares
// the same canonical form the digest hashes, so a field Explain is silent
// about never changes a digest.
func (k *Key) Explain(old, new spec.Rendered) []Change {
	return k.explain(toDocV1(old), "", toDocV1(new))
}

// ExplainRecord is Explain of the settings a container's record label holds
// (Record) and new. A keyed record holds env and label values as their
// hashes: they compare by hash, and the old values show as hashes even with
// WithValues. A record hashed with another key than k returns ErrOtherKey
// with the Changes of every other field (and of env and label keys): its
// values cannot be compared.
func (k *Key) ExplainRecord(record string, new spec.Rendered) ([]Change, error) {
	p, err := parseRecord(record)
	if err != nil {
		return nil, err
	}
	changes := k.explain(toDocV1(p.r), p.key, toDocV1(new))
	if p.key != "" && p.key != k.id {
		return changes, fmt.Errorf("the record's env and label values were %w (key %s; this machine's is %s): was the state directory's hash.key made anew?", ErrOtherKey, p.key, k.id)
	}
	return changes, nil
}

// explain compares old, whose secret values are hashed with the key of id
// oldKey ("" for values), with new, whose are values.
func (k *Key) explain(old docV1, oldKey string, new docV1) []Change {
	a, b := reflect.ValueOf(old), reflect.ValueOf(new)
	t := a.Type()
	var changes []Change
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		mut, _ := spec.MutabilityOf(name)
		if spec.SecretValues(name) {
			om, _ := a.Field(i).Interface().(map[string]string)
			nm, _ := b.Field(i).Interface().(map[string]string)
			if c, changed := k.secretChange(name, mut, om, oldKey, nm); changed {
				changes = append(changes, c)
			}
			continue
		}
		if reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			continue
		}
		changes = append(changes, describe(name, mut, a.Field(i), b.Field(i)))
	}
	return changes
}

// secretValue is one entry of a secret field as a comparison knows it.
type secretValue struct {
	sum   string // its keyed hash with k; "" when hashed with another key
	value string // the value, when known
	known bool
}

// short is how a Change shows v's hash.
func (v secretValue) short() string {
	if v.sum == "" {
		return "?"
	}
	return v.sum[:HashLen]
}

// shown is how WithValues shows v: the value when known, else its hash.
func (v secretValue) shown() string {
	if v.known {
		return v.value
	}
	return "(" + v.short() + ")"
}

// secretChange is the Change of a secret field from old (values hashed with
// the key of id oldKey; "" for values) to new (values), by key and keyed
// hash; false when nothing differs that can be told.
func (k *Key) secretChange(name string, mut spec.Mutability, old map[string]string, oldKey string, new map[string]string) (Change, bool) {
	side := func(m map[string]string, hashedWith string) map[string]secretValue {
		out := make(map[string]secretValue, len(m))
		for key, v := range m {
			switch hashedWith {
			case "":
				out[key] = secretValue{sum: k.sum(v), value: v, known: true}
			case k.id:
				out[key] = secretValue{sum: v}
			default:
				out[key] = secretValue{}
			}
		}
		return out
	}
	o, n := side(old, oldKey), side(new, "")
	keys := slices.Sorted(maps.Keys(o))
	for key := range n {
		if _, ok := o[key]; !ok {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	c := Change{Field: name, Mutability: mut}
	v := Change{Field: name, Mutability: mut}
	for _, key := range keys {
		ov, inOld := o[key]
		nv, inNew := n[key]
		switch {
		case !inOld:
			c.Added = append(c.Added, fmt.Sprintf("%s (%s)", key, nv.short()))
			v.Added = append(v.Added, key+"="+nv.shown())
		case !inNew:
			c.Removed = append(c.Removed, fmt.Sprintf("%s (%s)", key, ov.short()))
			v.Removed = append(v.Removed, key+"="+ov.shown())
		case ov.sum != "" && ov.sum != nv.sum:
			c.Changed = append(c.Changed, fmt.Sprintf("%s (%s→%s)", key, ov.short(), nv.short()))
			v.Changed = append(v.Changed, fmt.Sprintf("%s=%s→%s", key, ov.shown(), nv.shown()))
		}
	}
	if len(c.Added)+len(c.Removed)+len(c.Changed) == 0 {
		return Change{}, false
	}
	c.values = &v
	return c, true
}

func describe(name string, mut spec.Mutability, old, new reflect.Value) Change {
	c := Change{Field: name, Mutability: mut}
	switch old.Kind() {
	case reflect.Map:
		// Entries by key. (Secret fields never come here: secretChange.)
		for _, k := range sortedMapKeys(old, new) {
			ov, inOld := lookup(old, k)
			nv, inNew := lookup(new, k)
			switch {
			case !inOld:
				c.Added = append(c.Added, k+"="+nv)
			case !inNew:
				c.Removed = append(c.Removed, k+"="+ov)
			case ov != nv:
				c.Changed = append(c.Changed, fmt.Sprintf("%s=%s→%s", k, ov, nv))
			}
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
