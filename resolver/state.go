package resolver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

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

// LoadState reads the roster saved at statePath (Config.StatePath): the
// roster file and the deltas logged beside it. It returns an error
// wrapping fs.ErrNotExist when no roster was saved there.
func LoadState(statePath string) (*spec.Roster, error) {
	r, _, err := loadState(statePath)
	if errors.Is(err, errNoState) {
		return nil, fmt.Errorf("%w: %s", fs.ErrNotExist, statePath)
	}
	return r, err
}

// savedState is what loadState read besides the roster.
type savedState struct {
	baseGen  uint64 // the roster file's generation
	baseSize int64
	// broken says why the log could not all be applied: the roster is then
	// the one the roster file and the log's records before the fault
	// make, and the next save writes the roster file whole.
	broken error
}

func loadState(path string) (*spec.Roster, savedState, error) {
	data, records, err := deltalog.ReadStore(path, LogPath(path))
	if errors.Is(err, fs.ErrNotExist) && data == nil {
		return nil, savedState{}, errNoState
	}
	var st savedState
	var corrupt *deltalog.CorruptError
	if errors.As(err, &corrupt) {
		// The records before the damage are served, and the damage is
		// reported (broken): the next save writes the roster whole, and
		// the log is set aside before it is written (deltalog.Open).
		err = nil
	}
	if err != nil {
		if data == nil {
			return nil, st, fmt.Errorf("reading saved roster: %w", err)
		}
		st.broken = err // the log is unreadable: the roster file alone
	}
	r, err := specjson.ParseRoster(data)
	if err != nil {
		return nil, st, fmt.Errorf("saved roster %q is unreadable (remove it to start without one): %w", path, err)
	}
	st.baseGen, st.baseSize = r.Generation, int64(len(data))
	if st.broken == nil {
		st.broken = applyRecords(r, records, LogPath(path))
	}
	if st.broken == nil && corrupt != nil {
		st.broken = corrupt
	}
	return r, st, nil
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

// SaveRetryInterval is how often a roster served but not saved (its save
// failed: a full disk) is saved again, whole, until a save succeeds: a
// restart then serves it, not the roster saved before, even if no update
// comes after the disk is freed.
const SaveRetryInterval = 10 * time.Second

// state is a Server's saved roster.
type state struct {
	path       string
	store      *deltalog.Store
	compacting atomic.Bool
	// unsaved is set, under the Server's updateMu, while the roster
	// served is not the one saved (its save failed); failed wakes
	// retrySaves when it is set.
	unsaved atomic.Bool
	failed  chan struct{}
}

func openState(path string, saved savedState, faults deltalog.Faults) (*state, error) {
	st, err := deltalog.OpenStore(path, LogPath(path), saved.baseGen, saved.baseSize, saved.broken != nil)
	if err != nil {
		return nil, err
	}
	st.SetFaults(faults)
	return &state{path: path, store: st, failed: make(chan struct{}, 1)}, nil
}

// saved records, under the Server's updateMu, how the save of the roster
// now served ended (err nil: saved), and wakes retrySaves when it failed.
func (st *state) saved(err error) {
	st.unsaved.Store(err != nil)
	if err != nil {
		select {
		case st.failed <- struct{}{}:
		default:
		}
	}
}

// retrySaves saves the roster served again, whole, every
// SaveRetryInterval while its save has failed, until ctx is done.
func (s *Server) retrySaves(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.state.failed:
		}
		t := time.NewTimer(SaveRetryInterval)
		for s.state.unsaved.Load() {
			t.Reset(SaveRetryInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			s.retrySave()
		}
		t.Stop()
	}
}

// retrySave saves the roster served, whole, if its save failed. It holds
// the lock that orders updates, so that no update's save races it: an
// update waits for one write of the roster file, once per
// SaveRetryInterval, only while saves fail.
func (s *Server) retrySave() {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	if !s.state.unsaved.Load() {
		return
	}
	t := s.table.Load()
	err := s.safely(t.gen, "saving", func() error { return s.state.saveWhole(t, s.Busy) })
	s.state.saved(err)
	if err != nil {
		if !errors.Is(err, deltalog.ErrFrozen) { // handed over: the successor saves
			s.log.Warn("the roster served is still not saved; retrying", "roster_generation", t.gen, "retry_seconds", SaveRetryInterval.Seconds(), "err", err)
		}
		return
	}
	s.log.Info("roster saved after an earlier failure", "roster_generation", t.gen, "path", s.state.path)
}

// saveWhole writes t's roster as the roster file, atomically (a temporary
// file in the same directory, synced, renamed over it, and the directory
// synced), and drops the log's records it holds.
func (st *state) saveWhole(t *table, busy func() bool) error {
	if err := st.store.WriteBase(t.gen, t.appendJSON(nil, busy)); err != nil {
		return fmt.Errorf("saving roster to %q: %w", st.path, err)
	}
	return nil
}

// saveDelta appends d, which made the roster t serves, to the log; or
// writes t's roster whole if the log cannot take it.
func (st *state) saveDelta(t *table, d *spec.RosterDelta, busy func() bool) error {
	payload, err := d.MarshalJSON()
	if err == nil {
		err = st.store.Append(d.To, payload)
	}
	if errors.Is(err, deltalog.ErrWhole) {
		return st.saveWhole(t, busy)
	}
	if err != nil {
		return fmt.Errorf("saving roster to %q: %w", st.path, err)
	}
	return nil
}

// maybeCompact folds the log into the roster file in the background once
// the log has outgrown half of it (one compaction at a time). Queries do
// not wait for it, nor does a delta.
func (st *state) maybeCompact(s *Server) {
	if !st.store.Due() || !st.compacting.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer st.compacting.Store(false)
		st.compact(s)
	}()
}

// compact folds the log into the roster file now.
func (st *state) compact(s *Server) {
	// The snapshot is taken under the lock that orders updates: the
	// table it reads has been saved (or its save has failed and the
	// log wants a base), never one whose save is still to come. The
	// write itself runs unlocked; the store refuses a base older than
	// what it acknowledged.
	s.updateMu.Lock()
	t := s.table.Load()
	s.updateMu.Unlock()
	if err := s.safely(t.gen, "compacting", func() error { return st.saveWhole(t, s.Busy) }); err != nil {
		s.log.Warn("folding the roster log into the roster file failed; the log keeps growing until it can", "path", st.path, "err", err)
	}
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
