package journal

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
)

// How a kind's entries are stored. Since version 4 they are appended to
// segments: deltalog logs named by the key of their first entry
// (00000000000000000042.log), one record an entry, so that recording an
// entry is one append and one fsync, not a file made, renamed and its
// directory synced (on a small VM's disk that was half the CPU of a
// one-name roster change). A segment is full at segmentEntries entries or
// segmentBytes bytes; the next entry starts a new one. Pruning removes
// whole segments, oldest first, so a kind keeps from Keep entries up to a
// segment more. Entries of versions 1 to 3 are files of their own
// (00000000000000000042.json): they are read, and pruned, as they are.
const (
	segmentExt = ".log"
	entryExt   = ".json"
	// maxSegmentBytes bounds a segment, which is read whole when the
	// agent starts appending to it: a roster changed whole has a diff of
	// megabytes, and gets a segment to itself.
	maxSegmentBytes = 4 << 20
)

// unit is one file of a kind: a segment, or an entry file of version 1-3.
type unit struct {
	first, last uint64 // keys of its first and last entries
	count       int
	size        int64
	segment     bool
	damaged     bool // a record before its last is corrupt (readSegment)
}

// held is, per kind, the files on disk and their entries, in key order,
// read once at the first write and kept since: a write costs its entry,
// not a listing of the journal.
type held struct {
	units []unit
	total int   // entries
	bytes int64 // their bytes
	// tail is the newest segment, open for appending (nil until the first
	// append to it).
	tail *deltalog.Log
}

func (j *Journal) file(sub string, key uint64, ext string) string {
	return filepath.Join(j.dir, sub, fmt.Sprintf("%020d%s", key, ext))
}

// segmentEntries and segmentBytes are when a segment is full: a quarter of
// what the journal keeps, so that pruning drops a quarter at a time.
func (j *Journal) segmentEntries() int { return max(1, j.keep/4) }
func (j *Journal) segmentBytes() int64 { return min(max(1, j.maxBytes/4), maxSegmentBytes) }

// listed is a file of a kind's directory, by the key its name gives.
type listed struct {
	key     uint64
	segment bool
}

// list returns the files of sub, in key order (an entry file before a
// segment of the same key).
func (j *Journal) list(sub string) ([]listed, error) {
	des, err := os.ReadDir(filepath.Join(j.dir, sub))
	if err != nil {
		return nil, fmt.Errorf("reading journal: %w", err)
	}
	var out []listed
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") { // a temporary file of an entry write
			continue
		}
		for _, ext := range []string{entryExt, segmentExt} {
			base, ok := strings.CutSuffix(name, ext)
			if !ok {
				continue
			}
			if n, err := strconv.ParseUint(base, 10, 64); err == nil {
				out = append(out, listed{n, ext == segmentExt})
			}
		}
	}
	slices.SortFunc(out, func(a, b listed) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(b2i(a.segment), b2i(b.segment)))
	})
	return out, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stored is one entry as it is on disk.
type stored struct {
	key  uint64
	data []byte
}

// errPruned: a file listed was pruned before it was read.
var errPruned = errors.New("journal file pruned since it was listed")

// readUnit returns the entries of one file, and errPruned for a file
// pruned since it was listed.
func (j *Journal) readUnit(sub string, l listed) ([]stored, error) {
	if !l.segment {
		data, err := os.ReadFile(j.file(sub, l.key, entryExt))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, errPruned
		case err != nil:
			return nil, fmt.Errorf("reading journal entry: %w", err)
		}
		return []stored{{l.key, data}}, nil
	}
	// A torn last record (a crash mid-append, or an append under way in
	// the agent while an operator command reads) is left out.
	path := j.file(sub, l.key, segmentExt)
	recs, err := j.readSegment(path)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, errPruned
		}
	}
	out := make([]stored, len(recs))
	for i, r := range recs {
		out[i] = stored{r.Key, r.Payload}
	}
	return out, nil
}

// all returns every entry of sub, in key order.
func (j *Journal) all(sub string) ([]stored, error) {
	files, err := j.list(sub)
	if err != nil {
		return nil, err
	}
	var out []stored
	for _, l := range files {
		es, err := j.readUnit(sub, l)
		if errors.Is(err, errPruned) {
			// Pruned while this read ran (oldest first): what was read
			// before it is pruned too, and keeping it would leave a gap.
			out = out[:0]
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	// In key order already, unless an older meshhost wrote entry files
	// after a newer one's segments (a downgrade and upgrade again).
	slices.SortStableFunc(out, func(a, b stored) int { return cmp.Compare(a.key, b.key) })
	return slices.CompactFunc(out, func(a, b stored) bool { return a.key == b.key }), nil
}

// decodeAll decodes every entry of sub, in key order.
func decodeAll[E any](j *Journal, sub string) ([]E, error) {
	es, err := j.all(sub)
	if err != nil {
		return nil, err
	}
	out := make([]E, len(es))
	for i, e := range es {
		if err := json.Unmarshal(e.data, &out[i]); err != nil {
			return nil, fmt.Errorf("reading journal entry %d of %s: %w", e.key, filepath.Join(j.dir, sub), err)
		}
	}
	return out, nil
}

// read decodes entry key of sub into v: ErrNotFound when no file holds it.
func (j *Journal) read(sub string, key uint64, v any) error {
	files, err := j.list(sub)
	if err != nil {
		return err
	}
	// The entry file of that key, else the segment it would be in: the
	// last one starting at or before it.
	var candidates []listed
	if slices.Contains(files, listed{key, false}) {
		candidates = append(candidates, listed{key, false})
	}
	for _, l := range slices.Backward(files) {
		if l.segment && l.key <= key {
			candidates = append(candidates, l)
			break
		}
	}
	for _, l := range candidates {
		es, err := j.readUnit(sub, l)
		if errors.Is(err, errPruned) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range es {
			if e.key == key {
				if err := json.Unmarshal(e.data, v); err != nil {
					return fmt.Errorf("reading journal entry %d of %s: %w", key, filepath.Join(j.dir, sub), err)
				}
				return nil
			}
		}
	}
	return ErrNotFound
}

// heldLocked returns the files of sub, reading them the first time.
func (j *Journal) heldLocked(sub string) (*held, error) {
	syncs.AssertLocked(&j.mu)
	if h := j.held[sub]; h != nil {
		return h, nil
	}
	files, err := j.list(sub)
	if err != nil {
		return nil, err
	}
	h := &held{}
	for _, l := range files {
		u := unit{first: l.key, last: l.key, segment: l.segment}
		if !l.segment {
			fi, err := os.Stat(j.file(sub, l.key, entryExt))
			if err != nil {
				continue
			}
			u.count, u.size = 1, fi.Size()
		} else {
			path := j.file(sub, l.key, segmentExt)
			recs, err := j.readSegment(path)
			if err != nil {
				return nil, err
			}
			u.count = len(recs)
			for _, r := range recs {
				// "KEY CRC32C PAYLOAD\n"
				u.size += int64(len(strconv.FormatUint(r.Key, 10)) + 1 + 8 + 1 + len(r.Payload) + 1)
				u.last = r.Key
			}
			// A damaged segment is not appended to (that would cut off
			// what follows its damage): the next entry starts a new one.
			if u.damaged = j.isDamaged(path); u.damaged {
				if fi, err := os.Stat(path); err == nil {
					u.size = fi.Size()
				}
			}
		}
		h.units = append(h.units, u)
		h.total += u.count
		h.bytes += u.size
	}
	if j.held == nil {
		j.held = map[string]*held{}
	}
	j.held[sub] = h
	return h, nil
}

// lastLocked returns the newest key of sub, and false for none.
func (j *Journal) lastLocked(sub string) (uint64, bool, error) {
	syncs.AssertLocked(&j.mu)
	h, err := j.heldLocked(sub)
	if err != nil {
		return 0, false, err
	}
	var last uint64
	any := false
	for _, u := range h.units {
		if u.count > 0 && (!any || u.last > last) {
			last, any = u.last, true
		}
	}
	return last, any, nil
}

// writeLocked appends v as entry key of sub, which must be above every
// key sub holds, synced to disk before it returns, and prunes the oldest
// files beyond Keep and MaxBytes (a failure to prune is retried at the next
// write: the entry is recorded all the same).
func (j *Journal) writeLocked(sub string, key uint64, v any) error {
	syncs.AssertLocked(&j.mu)
	// Compact, so one line: a record holds no newline.
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding journal entry: %w", err)
	}
	h, err := j.heldLocked(sub)
	if err != nil {
		return err
	}
	if last, any, _ := j.lastLocked(sub); any && key <= last {
		return fmt.Errorf("writing journal entry %d of %s: the newest entry is %d, and keys only grow", key, sub, last)
	}
	n := len(h.units)
	if n == 0 || !h.units[n-1].segment || h.units[n-1].damaged || h.units[n-1].count >= j.segmentEntries() || h.units[n-1].size >= j.segmentBytes() {
		if err := j.startSegmentLocked(sub, h, key, data); err != nil {
			return fmt.Errorf("writing journal entry: %w", err)
		}
	} else {
		u := &h.units[n-1]
		if h.tail == nil {
			if h.tail, _, err = deltalog.Open(j.file(sub, u.first, segmentExt)); err != nil {
				return fmt.Errorf("writing journal entry: %w", err)
			}
			h.tail.SetFaults(j.faults.logFaults())
		}
		if err := h.tail.Append(key, data); err != nil {
			return fmt.Errorf("writing journal entry: %w", err)
		}
		grown := h.tail.Size() - u.size
		u.last, u.count, u.size = key, u.count+1, h.tail.Size()
		h.total++
		h.bytes += grown
	}
	for len(h.units) > 1 && (h.total-h.units[0].count >= j.keep || h.bytes > j.maxBytes) {
		o := h.units[0]
		ext := entryExt
		if o.segment {
			ext = segmentExt
		}
		err := j.faults.at(StepPrune, false)
		if err == nil {
			if err = os.Remove(j.file(sub, o.first, ext)); errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		}
		if err == nil {
			err = j.faults.at(StepPrune, true)
		}
		if err != nil {
			// The entry is recorded: this write succeeded, and the next
			// one prunes again. Failing it would give its key again to
			// the next write, which the journal refuses (keys only grow).
			return nil
		}
		h.total -= o.count
		h.bytes -= o.size
		h.units = h.units[1:]
	}
	return nil
}

// startSegmentLocked writes data, entry key, as the first of a new
// segment of sub, and syncs the directory so that the new file survives a
// crash (once a segment, not once an entry).
func (j *Journal) startSegmentLocked(sub string, h *held, key uint64, data []byte) error {
	syncs.AssertLocked(&j.mu)
	log, _, err := deltalog.Open(j.file(sub, key, segmentExt))
	if err != nil {
		return err
	}
	log.SetFaults(j.faults.logFaults())
	if err := log.Append(key, data); err != nil {
		log.Close()
		return err
	}
	err = j.faults.at(StepSegmentSync, false)
	if err == nil {
		err = syncDir(filepath.Join(j.dir, sub))
	}
	if err == nil {
		err = j.faults.at(StepSegmentSync, true)
	}
	if err != nil {
		// Not recorded, as the error says: the file goes again.
		log.Close()
		os.Remove(log.Path())
		return err
	}
	if h.tail != nil {
		h.tail.Close()
	}
	h.tail = log
	h.units = append(h.units, unit{first: key, last: key, count: 1, size: log.Size(), segment: true})
	h.total++
	h.bytes += log.Size()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return &fs.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}

// readSegment returns the records of the segment at path. A corrupt
// record with more after it does not fail the read: its entries stand
// alone, so those after it are read too (deltalog.ReadPast); the damage
// is reported once, and the segment copied aside (PATH.corrupt-TIME, which
// `meshhost status` lists) and never appended to again.
func (j *Journal) readSegment(path string) ([]deltalog.Record, error) {
	recs, err := deltalog.ReadPast(path)
	var ce *deltalog.CorruptError
	if errors.As(err, &ce) {
		j.reportCorrupt(ce)
		return recs, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading journal: %w", err)
	}
	return recs, nil
}

// reportCorrupt sets the damaged segment aside and logs it, once a
// segment.
func (j *Journal) reportCorrupt(ce *deltalog.CorruptError) {
	j.damagedMu.Lock()
	defer j.damagedMu.Unlock()
	if _, ok := j.damaged[ce.Path]; ok {
		return
	}
	if j.damaged == nil {
		j.damaged = map[string]bool{}
	}
	j.damaged[ce.Path] = true
	aside, err := deltalog.SetAside(ce.Path)
	if err != nil {
		j.log.Error("a journal segment is corrupt before its last entry, and setting it aside failed; its entries are read around the damage", "path", ce.Path, "offset", ce.Offset, "err", err)
		return
	}
	j.log.Warn("a journal segment is corrupt before its last entry: its entries are read around the damage, the segment is kept as it is and copied aside", "path", ce.Path, "offset", ce.Offset, "aside", aside)
}

func (j *Journal) isDamaged(path string) bool {
	j.damagedMu.Lock()
	defer j.damagedMu.Unlock()
	return j.damaged[path]
}
