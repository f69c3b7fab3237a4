package resolver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"

	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// The state file is the roster file format (specjson.ParseRoster), so an
// operator can read it, and feed it to `meshhost resolver --roster`.

var errNoState = errors.New("no saved roster")

func loadState(path string) (*spec.Roster, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoState
	}
	if err != nil {
		return nil, fmt.Errorf("reading saved roster: %w", err)
	}
	r, err := specjson.ParseRoster(data)
	if err != nil {
		return nil, fmt.Errorf("saved roster %q is unreadable (remove it to start without one): %w", path, err)
	}
	return r, nil
}

// saveState writes t's roster to path atomically: a temporary file in the
// same directory, synced, renamed over path, and the directory synced.
func saveState(path string, t *table, busy func() bool) error {
	if err := atomicfile.Write(path, t.appendJSON(nil, busy), 0o600); err != nil {
		return fmt.Errorf("saving roster to %q: %w", path, err)
	}
	return nil
}

// appendJSON writes the table's roster in the roster file format. Names are
// validated host names (letters, digits, hyphens, dots), so they need no
// escaping. It yields like buildTable, so saving a large roster does not
// stall queries on a single CPU.
func (t *table) appendJSON(b []byte, busy func() bool) []byte {
	y := yield.Yielder{Pending: busy}
	b = fmt.Appendf(b, `{"generation": %d, "zones": [`, t.gen)
	zones := make([]string, 0, len(t.zones))
	for _, z := range t.zones {
		zones = append(zones, z.name)
	}
	slices.Sort(zones)
	for i, z := range zones {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, z)
	}
	b = append(b, "], \"names\": {"...)
	first := true
	for i := range t.ents {
		y.Maybe()
		e := &t.ents[i]
		if !e.routed {
			continue
		}
		if !first {
			b = append(b, ",\n  "...)
		}
		first = false
		b = append(b, '"')
		b = append(b, t.nameOf(e)...)
		b = append(b, `": [`...)
		for j, a := range t.addrsOf(e) {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '"')
			b = a.AppendTo(b)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	return append(b, "}}\n"...)
}
