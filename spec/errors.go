package spec

import (
	"errors"
	"fmt"
	"strconv"
)

// FieldError reports a fault in one field of a declaration or roster, named by
// its path in the document, in the spirit of fs.PathError:
//
//	containers[3].stop_timeout: "6o s" is not a duration
type FieldError struct {
	Path   string `json:"path"`   // e.g. "containers[3].stop_timeout" or `names["a..b"]`
	Reason string `json:"reason"` // what is wrong and, where it helps, how to fix it
}

// Faults returns err's faults as FieldErrors, one per error it joins
// (errors.Join, unwrapped while it joins exactly one): a field's fault with
// its path, any other with an empty path. Never nil: what a command or an
// endpoint answers as JSON.
func Faults(err error) []FieldError {
	errs := []error{err}
	for {
		j, ok := errs[0].(interface{ Unwrap() []error })
		if len(errs) != 1 || !ok {
			break
		}
		errs = j.Unwrap()
	}
	out := make([]FieldError, 0, len(errs))
	for _, e := range errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, *fe)
		} else {
			out = append(out, FieldError{Reason: e.Error()})
		}
	}
	return out
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// fieldErrors collects FieldErrors so that a document reports every fault at
// once instead of one per round trip.
type fieldErrors []error

func (fe *fieldErrors) add(path, format string, args ...any) {
	*fe = append(*fe, &FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (fe fieldErrors) err() error { return errors.Join(fe...) }

// joinPath appends an object key to a FieldError path:
// joinPath("containers[3].env", "LOG"). Keys that are not plain identifiers
// are quoted: env["a b"].
func joinPath(path, key string) string {
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
