package resolver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// The state is two files. Config.StatePath is the roster file
// (specjson.ParseRoster's format), so that an operator can read it and feed
// it to `meshhost resolver --roster`. Beside it, StatePath+".log" holds
// the roster deltas applied since it was written (package deltalog, one
// delta a line in specjson.ParseRosterDelta's format, keyed by the
// generation it makes). A change of k names appends k names; the roster
// file is written whole when a whole roster is compiled, and, in the
// background, once the log outgrows half of it (compaction). Reading the
// state back is the roster file, then the log's deltas above its
// generation, in order.

var errNoState = errors.New("no saved roster")

// LogPath is the path of the log of deltas beside the roster file path.
func LogPath(statePath string) string { return statePath + ".log" }

// minCompact is the smallest log worth folding into the roster file.
const minCompact = 64 << 10

// LoadState reads the roster saved at statePath (Config.StatePath): the
// roster file and the deltas logged beside it. It returns an error
// wrapping fs.ErrNotExist when no roster was saved there.
func LoadState(statePath string) (*spec.Roster, error) {
	r, _, _, err := loadState(statePath)
	if errors.Is(err, errNoState) {
		return nil, fmt.Errorf("%w: %s", fs.ErrNotExist, statePath)
	}
	return r, err
}

// loadState reads the state: the roster, the size of the roster file, and
// (broken) why the log could not all be applied, in which case the roster
// is the one the roster file and the log's records before the fault make,
// and the next save writes the roster file whole.
func loadState(path string) (r *spec.Roster, baseSize int64, broken, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil, errNoState
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("reading saved roster: %w", err)
	}
	r, err = specjson.ParseRoster(data)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("saved roster %q is unreadable (remove it to start without one): %w", path, err)
	}
	records, _, err := deltalog.Read(LogPath(path))
	if err != nil {
		return r, int64(len(data)), err, nil
	}
	return r, int64(len(data)), applyRecords(r, records, LogPath(path)), nil
}

// applyRecords applies the deltas of records above r's generation to r, in
// order, and says why it stopped early, if it did.
func applyRecords(r *spec.Roster, records []deltalog.Record, path string) error {
	for _, rec := range records {
		if rec.Key <= r.Generation {
			continue // folded into the roster file already
		}
		d, err := specjson.ParseRosterDelta(rec.Payload)
		if err == nil && d.To != rec.Key {
			err = fmt.Errorf("the record is keyed %d but the delta makes generation %d", rec.Key, d.To)
		}
		if err == nil {
			_, err = r.Apply(d)
		}
		if err != nil {
			return fmt.Errorf("%s: the delta to generation %d: %w; serving generation %d", path, rec.Key, err, r.Generation)
		}
	}
	return nil
}

// state is a Server's saved roster.
type state struct {
	path string
	log  *deltalog.Log

	compacting atomic.Bool

	// mu orders writes of the roster file and guards the fields below.
	mu       sync.Mutex
	baseGen  uint64 // generation of the roster file
	baseSize int64
	// whole is set when the log no longer follows on from the roster
	// served (an append failed, or a record could not be read back): the
	// next save writes the roster file whole.
	whole bool
}

// openState opens the log beside path for appending; the roster file holds
// generation baseGen.
func openState(path string, baseGen uint64, baseSize int64, whole bool) (*state, error) {
	l, _, err := deltalog.Open(LogPath(path))
	if err != nil {
		return nil, err
	}
	return &state{path: path, log: l, baseGen: baseGen, baseSize: baseSize, whole: whole}, nil
}

// saveWhole writes t's roster as the roster file, atomically (a temporary
// file in the same directory, synced, renamed over it, and the directory
// synced), and drops the log's records it holds.
func (st *state) saveWhole(t *table, busy func() bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.writeLocked(t, busy)
}

func (st *state) writeLocked(t *table, busy func() bool) error {
	if t.gen <= st.baseGen && !st.whole {
		return nil // written already, or a newer one is
	}
	data := t.appendJSON(nil, busy)
	if err := atomicfile.Write(st.path, data, 0o600); err != nil {
		return fmt.Errorf("saving roster to %q: %w", st.path, err)
	}
	trim := func() error { return st.log.Trim(t.gen) }
	if st.whole {
		trim = st.log.Reset // its records may not follow on from the file
	}
	st.baseGen, st.baseSize = t.gen, int64(len(data))
	if err := trim(); err != nil {
		// The roster file is whole and newer than every record: readers
		// skip them. The next compaction trims again.
		return fmt.Errorf("saving roster to %q: %w", st.path, err)
	}
	st.whole = false
	return nil
}

// saveDelta appends d, which made the roster t serves, to the log; or
// writes t's roster whole if the log cannot take it.
func (st *state) saveDelta(t *table, d *spec.RosterDelta, busy func() bool) error {
	st.mu.Lock()
	whole := st.whole
	st.mu.Unlock()
	if !whole {
		payload, err := d.MarshalJSON()
		if err == nil {
			err = st.log.Append(d.To, payload)
		}
		if err == nil {
			return nil
		}
		st.mu.Lock()
		st.whole = true // the next delta would not follow on from the log
		st.mu.Unlock()
		return fmt.Errorf("saving roster to %q: %w", st.path, err)
	}
	return st.saveWhole(t, busy)
}

// maybeCompact folds the log into the roster file in the background once
// the log has outgrown half of it (one compaction at a time). Queries do
// not wait for it, nor does a delta.
func (st *state) maybeCompact(s *Server) {
	st.mu.Lock()
	due := st.log.Size() > max(st.baseSize/2, minCompact)
	st.mu.Unlock()
	if !due || !st.compacting.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer st.compacting.Store(false)
		t := s.table.Load()
		if err := s.safely(t.gen, "compacting", func() error { return st.saveWhole(t, s.Busy) }); err != nil {
			s.log.Warn("folding the roster log into the roster file failed; the log keeps growing until it can", "path", st.path, "err", err)
		}
	}()
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
	t.eachName(&y, func(name string, a4, a6 []byte) {
		if !first {
			b = append(b, ",\n  "...)
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `": [`...)
		for j, a := range addrList(a4, a6) {
			if j > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '"')
			b = a.AppendTo(b)
			b = append(b, '"')
		}
		b = append(b, ']')
	})
	return append(b, "}}\n"...)
}
