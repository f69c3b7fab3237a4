package flagfile

import (
	"fmt"
	"slices"
	"strings"
)

// Faults gathers a configuration's faults (a command's file and flags
// checked together), each named where its value was set: the file's line
// for a key the file set, the flag otherwise.
type Faults struct {
	Path  string         // the file
	Lines map[string]int // the keys the file set, by flag name, and their lines
	Errs  []error
}

// Read applies the file's values (Read's result) as the keys of f, and
// its errors as faults.
func (f *Faults) Read(vals []Value, err error) {
	if f.Lines == nil {
		f.Lines = map[string]int{}
	}
	if err != nil {
		f.Errs = append(f.Errs, flatten(err)...)
	}
	for _, v := range vals {
		f.Lines[v.Key] = v.Line
	}
}

// Add records err as the fault of key.
func (f *Faults) Add(key string, err error) {
	if line, ok := f.Lines[key]; ok {
		f.Errs = append(f.Errs, &Error{Path: f.Path, Line: line, Key: key, Err: err})
		return
	}
	f.Errs = append(f.Errs, fmt.Errorf("--%s: %w", key, err))
}

// Where names key as its fault would: "FILE:LINE: key", or "--key".
func (f *Faults) Where(key string) string {
	if line, ok := f.Lines[key]; ok {
		return fmt.Sprintf("%s:%d: %s", f.Path, line, key)
	}
	return "--" + key
}

// Err returns every fault, the file's in its order and then the command
// line's, as a *FaultsError; nil when there is none.
func (f *Faults) Err() error {
	if len(f.Errs) == 0 {
		return nil
	}
	errs := slices.Clone(f.Errs)
	slices.SortStableFunc(errs, func(a, b error) int { return faultLine(a) - faultLine(b) })
	return &FaultsError{errs}
}

// FaultsError is every fault of a configuration, one a line.
type FaultsError struct{ Errs []error }

func (e *FaultsError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "\n")
}

func (e *FaultsError) Unwrap() []error { return e.Errs }

// faultLine orders faults: a file's by line, the others last.
func faultLine(err error) int {
	if fe, ok := err.(*Error); ok && fe.Line > 0 {
		return fe.Line
	}
	return 1 << 30
}

// flatten returns the errors an errors.Join holds (err itself when it
// joins none).
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
