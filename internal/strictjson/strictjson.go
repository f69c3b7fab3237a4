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
	"io"
	"strconv"
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
func Parse(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, "", 0)
	if err != nil {
		return Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return Value{}, errors.New("unexpected data after the top-level value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, path string, depth int) (Value, error) {
	if depth > MaxDepth {
		return Value{}, fmt.Errorf("%s: nested deeper than %d levels", orRoot(path), MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return Value{}, syntaxError(err)
	}
	switch t := tok.(type) {
	case nil:
		return Value{Kind: KindNull}, nil
	case bool:
		return Value{Kind: KindBool, Bool: t}, nil
	case json.Number:
		return Value{Kind: KindNumber, Number: t}, nil
	case string:
		return Value{Kind: KindString, String: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := Value{Kind: KindArray}
			for dec.More() {
				item, err := parseValue(dec, path+"["+strconv.Itoa(len(v.Items))+"]", depth+1)
				if err != nil {
					return Value{}, err
				}
				v.Items = append(v.Items, item)
			}
			if _, err := dec.Token(); err != nil {
				return Value{}, syntaxError(err)
			}
			return v, nil
		case '{':
			v := Value{Kind: KindObject}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return Value{}, syntaxError(err)
				}
				key := kt.(string)
				kpath := Join(path, key)
				if seen[key] {
					return Value{}, fmt.Errorf("%s: key appears twice in the same object", kpath)
				}
				seen[key] = true
				mv, err := parseValue(dec, kpath, depth+1)
				if err != nil {
					return Value{}, err
				}
				v.Members = append(v.Members, Member{Key: key, Value: mv})
			}
			if _, err := dec.Token(); err != nil {
				return Value{}, syntaxError(err)
			}
			return v, nil
		}
	}
	return Value{}, fmt.Errorf("%s: unexpected token %v", orRoot(path), tok)
}

func syntaxError(err error) error {
	if err == io.EOF {
		return errors.New("not valid JSON: unexpected end of document")
	}
	return fmt.Errorf("not valid JSON: %w", err)
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
