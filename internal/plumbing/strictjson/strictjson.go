// Package strictjson reads JSON documents strictly: duplicate object keys,
// unknown fields and wrong types are faults named by their path in the
// document (`containers[3].stop_timeout`), and all of them are reported at
// once.
//
// encoding/json cannot do this: it keeps the last of two duplicate keys, and
// its DisallowUnknownFields error does not say where the field was.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxDepth bounds nesting so that a hostile document cannot exhaust the stack.
const MaxDepth = 64

// Kind is the JSON type of a Value.
type Kind int

const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

func (k Kind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// Value is one parsed JSON value. Object members keep their document order.
type Value struct {
	Kind    Kind
	Bool    bool
	Number  json.Number
	String  string
	Items   []Value
	Members []Member
}

// Member is one key of an object.
type Member struct {
	Key   string
	Value Value
}

// Parse reads exactly one JSON value from data. Duplicate keys are errors.
//
// It scans the bytes itself rather than through encoding/json's Decoder:
// a roster of 100,000 names is half a million tokens, and the Decoder's
// interface value per token, plus a path formatted for every value whether
// or not it is at fault, made parsing such a roster take over a second.
// Paths are built only for errors here.
func Parse(data []byte) (Value, error) {
	p := &parser{data: data}
	v, err := p.value(nil, 0)
	if err != nil {
		return Value{}, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return Value{}, errors.New("unexpected data after the top-level value")
	}
	return v, nil
}

// step is one step of a path, linked to its parent; formatted only when an
// error needs it.
type step struct {
	parent *step
	key    string
	index  int
	isKey  bool
}

func (s *step) String() string {
	if s == nil {
		return ""
	}
	if s.isKey {
		return Join(s.parent.String(), s.key)
	}
	return Index(s.parent.String(), s.index)
}

type parser struct {
	data []byte
	pos  int
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) syntaxError(what string) error {
	if p.pos >= len(p.data) {
		return errors.New("not valid JSON: unexpected end of document")
	}
	return fmt.Errorf("not valid JSON: %s at offset %d", what, p.pos)
}

func (p *parser) value(at *step, depth int) (Value, error) {
	if depth > MaxDepth {
		return Value{}, fmt.Errorf("%s: nested deeper than %d levels", orRoot(at.String()), MaxDepth)
	}
	p.skipSpace()
	if p.pos >= len(p.data) {
		return Value{}, p.syntaxError("")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(at, depth)
	case c == '[':
		return p.array(at, depth)
	case c == '"':
		s, err := p.string()
		return Value{Kind: KindString, String: s}, err
	case c == 't':
		return Value{Kind: KindBool, Bool: true}, p.literal("true")
	case c == 'f':
		return Value{Kind: KindBool}, p.literal("false")
	case c == 'n':
		return Value{Kind: KindNull}, p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		n, err := p.number()
		return Value{Kind: KindNumber, Number: n}, err
	}
	return Value{}, p.syntaxError(fmt.Sprintf("unexpected %q", p.data[p.pos]))
}

func (p *parser) literal(word string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return p.syntaxError("invalid literal")
	}
	p.pos += len(word)
	return nil
}

// number scans a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() (json.Number, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case digits() == 0:
		return "", p.syntaxError("invalid number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return "", p.syntaxError("invalid number")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return "", p.syntaxError("invalid number")
		}
	}
	return json.Number(p.data[start:p.pos]), nil
}

// string scans a string starting at its opening quote. Plain strings are
// sliced out as they are; one with escapes or bytes that are not valid
// UTF-8 is decoded by encoding/json, so both read it the same way.
func (p *parser) string() (string, error) {
	start := p.pos
	p.pos++
	plain := true
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			raw := p.data[start:p.pos]
			if plain {
				return string(raw[1 : len(raw)-1]), nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				p.pos = start
				return "", p.syntaxError("invalid string")
			}
			return s, nil
		case c == '\\':
			plain = false
			p.pos += 2
		case c < 0x20:
			return "", p.syntaxError("control character in string")
		case c >= utf8.RuneSelf:
			plain = false
			p.pos++
		default:
			p.pos++
		}
	}
	return "", p.syntaxError("")
}

func (p *parser) array(at *step, depth int) (Value, error) {
	p.pos++ // [
	v := Value{Kind: KindArray}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		item, err := p.value(&step{parent: at, index: len(v.Items)}, depth+1)
		if err != nil {
			return Value{}, err
		}
		v.Items = append(v.Items, item)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, p.syntaxError("")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return v, nil
		default:
			return Value{}, p.syntaxError("expected , or ] in array")
		}
	}
}

func (p *parser) object(at *step, depth int) (Value, error) {
	p.pos++ // {
	v := Value{Kind: KindObject}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	var seen map[string]bool // built once an object is too large to scan
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return Value{}, p.syntaxError("expected a string key")
		}
		key, err := p.string()
		if err != nil {
			return Value{}, err
		}
		if dupKey(v.Members, &seen, key) {
			return Value{}, fmt.Errorf("%s: key appears twice in the same object", Join(at.String(), key))
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return Value{}, p.syntaxError("expected : after a key")
		}
		p.pos++
		mv, err := p.value(&step{parent: at, key: key, isKey: true}, depth+1)
		if err != nil {
			return Value{}, err
		}
		v.Members = append(v.Members, Member{Key: key, Value: mv})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return Value{}, p.syntaxError("")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return v, nil
		default:
			return Value{}, p.syntaxError("expected , or } in object")
		}
	}
}

// dupKey reports whether key is already a member, scanning small objects
// and indexing large ones.
func dupKey(members []Member, seen *map[string]bool, key string) bool {
	const scanMax = 16
	if len(members) < scanMax {
		for _, m := range members {
			if m.Key == key {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]bool, 2*len(members))
		for _, m := range members {
			(*seen)[m.Key] = true
		}
	}
	if (*seen)[key] {
		return true
	}
	(*seen)[key] = true
	return false
}

func orRoot(path string) string {
	if path == "" {
		return "(document)"
	}
	return path
}

// Join appends an object key to a path: Join("containers[3]", "image").
// Keys that are not plain identifiers are quoted: names["a b"].
func Join(path, key string) string {
	plain := key != ""
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	default:
		return path + "." + key
	}
}

// Index appends an array index to a path.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }
