// Package flagfile applies a configuration file to a command's flags: a
// TOML document whose keys are the command's flag names, as the flags
// take them:
//
//	state = "/var/lib/meshhost"
//	budget = 3
//	budget-window = "1m"
//	listen = ["127.0.0.1:53", "[::1]:53"]
//
// It is read strictly: a key that names no flag, a table, or a value of
// the wrong type is an error naming the file, the line and the key. Flags
// given on the command line win over the file; the file wins over the
// flags' defaults. Each value goes through the flag's own parsing, so the
// file accepts exactly what the command line does.
package flagfile

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Error is a fault in a file: its path, the line of the key when known,
// the key, and what is wrong.
type Error struct {
	Path string
	Line int // 0: unknown
	Key  string
	Err  error
}

func (e *Error) Error() string {
	where := e.Path
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	if e.Key == "" {
		return where + ": " + e.Err.Error()
	}
	return fmt.Sprintf("%s: %s: %v", where, e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrUnknownKey is wrapped by the Error of a key that names no flag.
var ErrUnknownKey = errors.New("unknown key")

// Apply reads the file at path and sets, on fs (parsed already), every
// flag the file names that the command line did not set: those in given,
// or, given nil, those fs.Visit sees (a flag set parsed by another parser,
// pflag's for one, sets values behind fs's back, so its caller passes
// what that parser saw set). The flags named
// in skip (the one naming the file itself, say) are not settable from it.
// It returns the keys applied, sorted, or every fault found (errors.Join
// of *Error): a key naming no flag or of the wrong type, found before
// anything is set, or a value the flag refuses (the flags are then set
// in part: a command stops there).
func Apply(fs *flag.FlagSet, path string, given map[string]bool, skip ...string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	return ApplyData(fs, path, data, given, skip...)
}

// ApplyData is Apply of a file's contents (path names it in errors).
func ApplyData(fs *flag.FlagSet, path string, data []byte, given map[string]bool, skip ...string) ([]string, error) {
	vals, err := Values(fs, path, data, skip...)
	if err != nil {
		return nil, err
	}
	applied, err := apply(fs, path, vals, given)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(applied))
	for i, v := range applied {
		keys[i] = v.Key
	}
	slices.Sort(keys)
	return keys, nil
}

// Read is ApplyData for a command that checks everything before it
// stops: it applies the file's sound keys even when others are faulty,
// and returns the values applied (in the file's order, with their lines)
// and every fault of the file, joined.
func Read(fs *flag.FlagSet, path string, data []byte, given map[string]bool, skip ...string) ([]Value, error) {
	vals, verr := Values(fs, path, data, skip...)
	applied, err := apply(fs, path, vals, given)
	return applied, errors.Join(verr, err)
}

// apply sets on fs each of vals that given (nil: what fs.Visit sees) does
// not name, and returns those it set and the values refused.
func apply(fs *flag.FlagSet, path string, vals []Value, given map[string]bool) ([]Value, error) {
	if given == nil {
		given = map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	}
	var errs []error
	var applied []Value
	for _, v := range vals {
		if given[v.Key] {
			continue
		}
		var err error
		for _, s := range v.Strings {
			if err = fs.Set(v.Key, s); err != nil {
				errs = append(errs, &Error{Path: path, Line: v.Line, Key: v.Key, Err: fmt.Errorf("invalid value %q: %w", s, err)})
				break
			}
		}
		if err == nil {
			applied = append(applied, v)
		}
	}
	return applied, errors.Join(errs...)
}

// Value is one key of a file, as the strings its flag is set with (more
// than one for a list).
type Value struct {
	Key     string
	Line    int
	Strings []string
}

// Values reads a file's keys against fs's flags, checking that each names
// a flag (not one of skip) and has a value of the flag's kind, and returns
// them in the file's order. It sets nothing. With an error (every fault,
// joined), it returns the sound keys too, or none when the file is not
// TOML.
func Values(fs *flag.FlagSet, path string, data []byte, skip ...string) ([]Value, error) {
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &Error{Path: path, Line: pe.Position.Line, Err: errors.New(pe.Message)}
		}
		return nil, &Error{Path: path, Err: err}
	}
	lines := keyLines(data)
	var out []Value
	var errs []error
	for key, raw := range doc {
		fail := func(err error) { errs = append(errs, &Error{Path: path, Line: lines[key], Key: key, Err: err}) }
		if _, ok := raw.(map[string]any); ok {
			fail(errors.New("is a table; keys are the flags' names, at the top level"))
			continue
		}
		f := fs.Lookup(key)
		if f == nil || slices.Contains(skip, key) {
			err := fmt.Errorf("%w: no flag --%s", ErrUnknownKey, key)
			if s := suggest(fs, key, skip); s != "" {
				err = fmt.Errorf("%w (did you mean %s?)", err, s)
			}
			fail(err)
			continue
		}
		strs, err := convert(f, raw)
		if err != nil {
			fail(err)
			continue
		}
		out = append(out, Value{Key: key, Line: lines[key], Strings: strs})
	}
	slices.SortFunc(out, func(a, b Value) int { return a.Line - b.Line })
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return a.(*Error).Line - b.(*Error).Line })
		return out, errors.Join(errs...)
	}
	return out, nil
}

// convert turns a TOML value into the strings flag f is set with, if it
// is of f's kind: a boolean for a boolean flag, an integer for an integer
// flag, a number for a float, a string for a string or a duration ("90s"),
// and a string or an array of strings for any other (a list, such as
// --listen).
func convert(f *flag.Flag, raw any) ([]string, error) {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		switch v := raw.(type) {
		case string:
			return []string{v}, nil
		case []any:
			var out []string
			for i, e := range v {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("element %d is %s, want a string", i, kind(e))
				}
				out = append(out, s)
			}
			return out, nil
		}
		return nil, fmt.Errorf("is %s, want a string or an array of strings", kind(raw))
	}
	want := ""
	switch g.Get().(type) {
	case bool:
		if v, ok := raw.(bool); ok {
			return []string{strconv.FormatBool(v)}, nil
		}
		want = "true or false"
	case int, int64, uint, uint64:
		if v, ok := raw.(int64); ok {
			return []string{strconv.FormatInt(v, 10)}, nil
		}
		want = "an integer"
	case float64:
		switch v := raw.(type) {
		case float64:
			return []string{strconv.FormatFloat(v, 'g', -1, 64)}, nil
		case int64:
			return []string{strconv.FormatInt(v, 10)}, nil
		}
		want = "a number"
	case time.Duration:
		if v, ok := raw.(string); ok {
			if _, err := time.ParseDuration(v); err != nil {
				return nil, fmt.Errorf(`%q is not a duration (write e.g. "30s" or "2m")`, v)
			}
			return []string{v}, nil
		}
		want = `a duration as a string, e.g. "30s" or "2m"`
	default:
		if v, ok := raw.(string); ok {
			return []string{v}, nil
		}
		want = "a string"
	}
	return nil, fmt.Errorf("is %s, want %s", kind(raw), want)
}

// kind names a TOML value's type for an error.
func kind(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case int64, float64, bool:
		return fmt.Sprint(v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date"
	}
	return fmt.Sprintf("%T", v)
}

// keyRE finds a top-level key's line: `key =`, `"key" =` or `'key' =`.
var keyRE = regexp.MustCompile(`^\s*(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_-]+))\s*=`)

// tableRE finds a table's header: `[name]`, `[name.sub]` or `[[name]]`.
var tableRE = regexp.MustCompile(`^\s*\[\[?\s*"?([A-Za-z0-9_-]+)`)

// keyLines returns the line of each key assigned at the top level.
func keyLines(data []byte) map[string]int {
	out := map[string]int{}
	for i, l := range strings.Split(string(data), "\n") {
		if m := keyRE.FindStringSubmatch(l); m != nil {
			k := m[1] + m[2] + m[3]
			if _, dup := out[k]; !dup {
				out[k] = i + 1
			}
		} else if m := tableRE.FindStringSubmatch(l); m != nil {
			// A table: its name is a top-level key; what follows is not.
			if _, dup := out[m[1]]; !dup {
				out[m[1]] = i + 1
			}
			break
		}
	}
	return out
}

// suggest returns the flag name closest to key (at most two edits away),
// or "".
func suggest(fs *flag.FlagSet, key string, skip []string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(skip, f.Name) {
			names = append(names, f.Name)
		}
	})
	return Closest(key, names)
}

// Closest returns the word of words closest to w, at most two edits away
// (Levenshtein), or "": the "did you mean" of a misspelt key or value.
func Closest(w string, words []string) string {
	best, bestD := "", 3
	for _, c := range words {
		if d := distance(w, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
