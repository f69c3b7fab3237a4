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

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Path + ": " + e.Reason
}

// MaxFaults bounds the faults one error names, whatever reports it (an
// HTTP reply, a command's JSON error, a log line): a delta removing 1.5
// million names the roster lacked was once refused with one fault per name,
// in a single log line of 122 MB. Beyond MaxFaults a last fault says how
// many more there are: "and 1499900 more faults".
const MaxFaults = 100

// FaultList collects the faults of a document, so that it reports every
// one at once instead of one per round trip: the first MaxFaults, and how
// many more (which it counts without formatting them). The zero FaultList
// is empty and ready.
type FaultList struct {
	errs []error
	more int // faults beyond MaxFaults, counted only
}

// Add adds the fault of the field at path.
func (l *FaultList) Add(path, format string, args ...any) {
	if len(l.errs) >= MaxFaults {
		l.more++
		return
	}
	l.errs = append(l.errs, &FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// AddErr adds err as one fault (nil adds none). The count of faults a
// FaultList's error left out (its last one) adds to l's count.
func (l *FaultList) AddErr(err error) {
	m, isMore := err.(moreFaults)
	switch {
	case err == nil:
	case isMore:
		l.more += int(m)
	case len(l.errs) >= MaxFaults:
		l.more++
	default:
		l.errs = append(l.errs, err)
	}
}

// Len is the number of faults added, those left out included.
func (l *FaultList) Len() int { return len(l.errs) + l.more }

// Err joins the faults (errors.Join), the last saying how many more were
// left out, if any; nil when there are none.
func (l *FaultList) Err() error {
	if l.more == 0 {
		return errors.Join(l.errs...)
	}
	return errors.Join(append(l.errs[:len(l.errs):len(l.errs)], moreFaults(l.more))...)
}

// JoinFaults is errors.Join bounded as a FaultList bounds its faults.
func JoinFaults(errs ...error) error {
	var l FaultList
	for _, err := range errs {
		l.AddErr(err)
	}
	return l.Err()
}

// moreFaults is the last fault of a FaultList that left some out: how
// many.
type moreFaults int

func (m moreFaults) Error() string { return fmt.Sprintf("and %d more faults", int(m)) }

// Faults returns err's faults as FieldErrors, at most MaxFaults of them and
// then one saying how many more: a field's fault with its path, any other
// with an empty path. It looks through wrappers (fmt.Errorf("reading %s:
// %w", ...)) down to a *FieldError or to the errors joined (errors.Join),
// each of which it reads the same way; a wrapper of anything else is one
// fault, its whole message. Never nil: what a command or an endpoint
// answers as JSON.
func Faults(err error) []FieldError {
	out := []FieldError{}
	more := 0
	var walk func(error)
	walk = func(e error) {
		for cur := e; cur != nil; {
			switch x := cur.(type) {
			case *FieldError:
				if len(out) < MaxFaults {
					out = append(out, *x)
				} else {
					more++
				}
				return
			case moreFaults:
				more += int(x)
				return
			case interface{ Unwrap() []error }:
				if cs := x.Unwrap(); len(cs) > 0 {
					for _, c := range cs {
						walk(c)
					}
					return
				}
			case interface{ Unwrap() error }:
				cur = x.Unwrap()
				continue
			}
			break // neither a fault nor a wrapper of one
		}
		// No field's fault below e: e is one fault, as it says.
		if len(out) < MaxFaults {
			out = append(out, FieldError{Reason: e.Error()})
		} else {
			more++
		}
	}
	if err != nil {
		walk(err)
	}
	if more > 0 {
		out = append(out, FieldError{Reason: moreFaults(more).Error()})
	}
	return out
}

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
