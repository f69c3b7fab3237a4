// Package deltalog keeps the changes made to a document since it was last
// written whole, as an append-only log beside it, so that a small change
// costs a small write instead of rewriting the document.
//
// A Store writes the document (the base) whole, atomically, appends each
// change to the log with its key (the generation the change brings the
// document to; keys only grow), and trims the log after each base. The
// owner folds the log into a new base now and then (Due). Reading back is
// the base, then every record whose key is above the base's generation,
// in order.
//
// A record is one line, "KEY CRC32C PAYLOAD\n", the payload without a
// newline (compact JSON). A crash can tear only the last line: it fails
// its checksum, or has no newline, and is dropped (and cut off when the log
// is next opened for appending). So a record is in the log whole or not at
// all, and a base written whole always has a valid log after it, whatever
// the moment of a crash: records at or below the base's generation are
// skipped by readers.
package deltalog

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Step is one write a Log or Store makes, named for fault injection
// (Faults).
type Step int

// The write steps, in the order a Store makes them.
const (
	StepAppendWrite   Step = iota // a record written to the log
	StepAppendSync                // the log synced after it
	StepBaseWrite                 // the base written whole (atomically)
	StepTrimWrite                 // the log written anew without the base's records
	StepResetTruncate             // the log emptied in place
	StepResetSync                 // the log synced after it
	NumSteps
)

// Faults is called before each write step (after false) and after it
// succeeds (after true); an error it returns is that step's error. Tests
// pass one to inject faults; nil means none.
type Faults func(step Step, after bool) error

func (f Faults) at(step Step, after bool) error {
	if f == nil {
		return nil
	}
	return f(step, after)
}

// Record is one change read back from a log.
type Record struct {
	Key     uint64
	Payload []byte
}

// CorruptError reports a record that fails its checksum (or is not in
// the form a record is written in) with more of the log after it: not a
// torn last line, which a crash can leave, but damage. The records before
// it are returned; those after it are not read, and are kept: Open sets
// the file aside (SetAside) before it appends.
type CorruptError struct {
	Path   string
	Offset int64 // where the bad record starts
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: the record at byte %d is corrupt and records follow it: serving the records before it; the file is kept (set aside as %s.corrupt-TIME when next written); restore it or remove it", e.Path, e.Offset, e.Path)
}

// Read returns the whole records of the log at path, in order, and where
// the valid part of the file ends. A missing file has no records. A torn
// last record is left out. A bad record with more after it ends the
// records read, and Read returns them with a *CorruptError.
func Read(path string) (records []Record, valid int64, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", path, err)
	}
	records, valid, corrupt := parse(data)
	if corrupt {
		return records, valid, &CorruptError{Path: path, Offset: valid}
	}
	return records, valid, nil
}

// parse reads the records of data; corrupt says a bad record that is not
// the last line stopped it.
func parse(data []byte) (out []Record, valid int64, corrupt bool) {
	off := 0
	for off < len(data) {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			break // torn: no newline yet
		}
		last := off+nl+1 == len(data)
		rec, ok := parseLine(data[off : off+nl+1])
		if ok && len(out) > 0 && rec.Key <= out[len(out)-1].Key {
			ok = false // keys only grow: anything else is not this log's
		}
		if !ok {
			return out, int64(off), !last
		}
		out = append(out, rec)
		off += nl + 1
	}
	return out, int64(off), false
}

// ReadPast is Read for a log whose records stand alone (a journal's
// entries, not changes that each follow on from the one before): a bad
// record with more after it is skipped, and the records after it are
// returned too, with a *CorruptError for the first bad one. A torn last
// record is left out, as by Read.
func ReadPast(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var out []Record
	var first *CorruptError
	off := 0
	for off < len(data) {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			break // torn: no newline yet
		}
		rec, ok := parseLine(data[off : off+nl+1])
		if ok && len(out) > 0 && rec.Key <= out[len(out)-1].Key {
			ok = false
		}
		if ok {
			out = append(out, rec)
		} else if off+nl+1 < len(data) && first == nil {
			first = &CorruptError{Path: path, Offset: int64(off)}
		}
		off += nl + 1
	}
	if first != nil {
		return out, first
	}
	return out, nil
}

// SetAside copies the log at path to PATH.corrupt-TIME, unless a copy
// set aside before is there already, and returns the copy's path.
func SetAside(path string) (string, error) {
	if m, _ := filepath.Glob(globEscape(path) + ".corrupt-*"); len(m) > 0 {
		return m[len(m)-1], nil
	}
	aside := asideName(path)
	return aside, copyAside(path, aside)
}

func asideName(path string) string {
	return fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
}

// globEscape quotes the glob metacharacters of path.
func globEscape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parseLine reads one record's line, its newline included.
func parseLine(line []byte) (Record, bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return Record{}, false
	}
	key, err := strconv.ParseUint(string(line[:sp]), 10, 64)
	if err != nil {
		return Record{}, false
	}
	payload := line[min(sp+10, len(line)-1) : len(line)-1]
	// Only the form appendLine writes: a record is its bytes, exactly.
	if !bytes.Equal(appendLine(nil, key, payload), line) {
		return Record{}, false
	}
	return Record{Key: key, Payload: payload}, true
}

func appendLine(b []byte, key uint64, payload []byte) []byte {
	b = strconv.AppendUint(b, key, 10)
	b = append(b, ' ')
	b = fmt.Appendf(b, "%08x", crc32.Checksum(payload, castagnoli))
	b = append(b, ' ')
	b = append(b, payload...)
	return append(b, '\n')
}

// Log appends records to one log file. Its methods are safe for
// concurrent use.
type Log struct {
	path string

	// mu guards the fields below.
	mu   sync.Mutex
	f    *os.File // open for appending; nil until the first Append
	size int64    // bytes of valid records in the file
	last uint64   // key of the last record, 0 when none
	// marks are the keys and end offsets of the records in the file, so
	// that Trim keeps the tail without reading the whole log.
	marks []mark
	// created: the file did not exist before it was opened for appending.
	created bool
	aside   string // see SetAside
	frozen  bool   // see Store.Freeze
	faults  Faults // fixed once the log is in use (SetFaults)
}

// SetFaults sets the fault injector of the log's writes; call it before
// the log is used.
func (l *Log) SetFaults(f Faults) { l.faults = f }

// SetFaults sets the fault injector of the store's writes; call it before
// the store is used.
func (s *Store) SetFaults(f Faults) {
	s.faults = f
	s.log.SetFaults(f)
}

type mark struct {
	key uint64
	end int64
}

// Open reads the log at path (a missing one is empty) and returns it,
// ready to append, with the records it holds. A torn last record is cut
// off the file at the first Append, so that nothing follows garbage. A
// corrupt record with records after it (*CorruptError) is not cut off:
// the file is first copied aside, to PATH.corrupt-TIME (SetAside), and
// the log goes on from the records before it.
func Open(path string) (*Log, []Record, error) {
	records, valid, err := Read(path)
	var ce *CorruptError
	aside := ""
	if errors.As(err, &ce) {
		aside = asideName(path)
		if err := copyAside(path, aside); err != nil {
			return nil, nil, fmt.Errorf("%w; setting it aside: %w", ce, err)
		}
		slog.Warn("a log is corrupt before its last record: the records after the bad one are set aside, not served", "path", path, "offset", ce.Offset, "aside", aside)
	} else if err != nil {
		return nil, nil, err
	}
	l := &Log{path: path, size: valid, aside: aside}
	var end int64
	for _, r := range records {
		end += int64(len(appendLine(nil, r.Key, r.Payload)))
		l.marks = append(l.marks, mark{r.Key, end})
		l.last = r.Key
	}
	return l, records, nil
}

func copyAside(path, aside string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return atomicfile.Write(aside, data, 0o600)
}

// SetAside is the copy of a corrupt log Open kept before going on without
// the records after the bad one, or "" when the log was sound.
func (l *Log) SetAside() string { return l.aside }

// Path is the log's file.
func (l *Log) Path() string { return l.path }

// Size is the bytes the log's records take.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Append adds a record with key, which must be above every key in the
// log, and syncs it to disk before returning. payload must not contain a
// newline. On error the log is as it was (a partly written record is cut
// off again, or, failing that, dropped by the next reader).
func (l *Log) Append(key uint64, payload []byte) error {
	if bytes.IndexByte(payload, '\n') >= 0 {
		return fmt.Errorf("appending to %s: a record may not contain a newline", l.path)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frozen {
		return fmt.Errorf("appending to %s: %w", l.path, ErrFrozen)
	}
	if key <= l.last {
		return fmt.Errorf("appending to %s: key %d is not above the last one, %d", l.path, key, l.last)
	}
	if err := l.openLocked(); err != nil {
		return err
	}
	line := appendLine(nil, key, payload)
	if err := l.faults.at(StepAppendWrite, false); err != nil {
		return &fs.PathError{Op: "write", Path: l.path, Err: err}
	}
	_, err := l.f.WriteAt(line, l.size)
	if err == nil {
		err = l.faults.at(StepAppendWrite, true)
	}
	if err == nil {
		err = l.faults.at(StepAppendSync, false)
	}
	if err != nil {
		l.undoLocked()
		return &fs.PathError{Op: "write", Path: l.path, Err: unwrapPath(err)}
	}
	err = l.f.Sync()
	if err == nil {
		err = l.faults.at(StepAppendSync, true)
	}
	if err != nil {
		l.undoLocked()
		return &fs.PathError{Op: "sync", Path: l.path, Err: unwrapPath(err)}
	}
	l.size += int64(len(line))
	l.last = key
	l.marks = append(l.marks, mark{key, l.size})
	return nil
}

// undoLocked takes back a failed append: the file is cut back to its
// records, or removed when the append created it (a failed write leaves
// the directory as it was).
func (l *Log) undoLocked() {
	syncs.AssertLocked(&l.mu)
	if l.created && l.size == 0 {
		l.f.Close()
		if os.Remove(l.path) == nil {
			l.f = nil
			return
		}
		l.f, _ = os.OpenFile(l.path, os.O_RDWR, 0)
		if l.f == nil {
			return
		}
	}
	l.f.Truncate(l.size)
}

// openLocked opens the file for writing and cuts off what follows the
// valid records (a torn record).
func (l *Log) openLocked() error {
	syncs.AssertLocked(&l.mu)
	if l.f != nil {
		return nil
	}
	_, err := os.Stat(l.path)
	l.created = errors.Is(err, fs.ErrNotExist)
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err == nil && fi.Size() != l.size {
		if err := f.Truncate(l.size); err != nil {
			f.Close()
			return &fs.PathError{Op: "truncate", Path: l.path, Err: unwrapPath(err)}
		}
	}
	l.f = f
	return nil
}

// Trim drops the records whose key is at or below through: the owner has
// just written a base of generation through. The records above it stay,
// in a log written anew atomically, so a crash leaves either log, and
// both read correctly after the new base.
func (l *Log) Trim(through uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frozen {
		return fmt.Errorf("trimming %s: %w", l.path, ErrFrozen)
	}
	var start int64
	i := 0
	for ; i < len(l.marks) && l.marks[i].key <= through; i++ {
		start = l.marks[i].end
	}
	if i == 0 {
		return nil
	}
	tail := make([]byte, l.size-start)
	if len(tail) > 0 {
		if err := l.openLocked(); err != nil {
			return err
		}
		if _, err := l.f.ReadAt(tail, start); err != nil && !errors.Is(err, io.EOF) {
			return &fs.PathError{Op: "read", Path: l.path, Err: unwrapPath(err)}
		}
	}
	if err := l.faults.at(StepTrimWrite, false); err != nil {
		return err
	}
	err := atomicfile.Write(l.path, tail, 0o600)
	if err == nil {
		err = l.faults.at(StepTrimWrite, true)
	}
	if err != nil {
		// The new log may have replaced the old one (a rename done, the
		// directory's sync failed): appending to the file still open could
		// write to an unlinked one. Read back whichever is there.
		l.reloadLocked()
		return err
	}
	if l.f != nil {
		l.f.Close()
		l.f = nil // reopened (the new file) at the next Append
	}
	marks := make([]mark, 0, len(l.marks)-i)
	for _, m := range l.marks[i:] {
		marks = append(marks, mark{m.key, m.end - start})
	}
	l.marks, l.size = marks, l.size-start
	return nil
}

// reloadLocked forgets the open file and takes the log's records from the
// file at its path.
func (l *Log) reloadLocked() {
	syncs.AssertLocked(&l.mu)
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	records, valid, _ := Read(l.path)
	l.marks, l.size, l.last = nil, valid, 0
	var end int64
	for _, r := range records {
		end += int64(len(appendLine(nil, r.Key, r.Payload)))
		l.marks = append(l.marks, mark{r.Key, end})
		l.last = r.Key
	}
}

// Reset empties the log, and lets keys start again from any value: the
// owner has just written a base that no record follows on from (the log
// held records it could not apply, or one failed to append).
func (l *Log) Reset() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frozen {
		return fmt.Errorf("emptying %s: %w", l.path, ErrFrozen)
	}
	// Truncating in place needs no free space, so it works on a full disk.
	if err := l.openLocked(); err != nil {
		return err
	}
	if err := l.faults.at(StepResetTruncate, false); err != nil {
		return err
	}
	if err := l.f.Truncate(0); err != nil {
		return &fs.PathError{Op: "truncate", Path: l.path, Err: unwrapPath(err)}
	}
	if err := l.faults.at(StepResetTruncate, true); err != nil {
		return err
	}
	if err := l.faults.at(StepResetSync, false); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		return &fs.PathError{Op: "sync", Path: l.path, Err: unwrapPath(err)}
	}
	if err := l.faults.at(StepResetSync, true); err != nil {
		return err
	}
	l.marks, l.size, l.last = nil, 0, 0
	return nil
}

// Close closes the log's file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ErrWhole is returned by Store.Append when the log no longer follows on
// from the base (an append failed before, or the log held records its
// owner could not apply): the owner writes the document whole instead.
var ErrWhole = errors.New("the log does not follow on from the base: write the document whole")

// MinCompact is the smallest log Store.Due asks to fold into the base.
const MinCompact = 64 << 10

// Store is a document kept as a base file, written whole now and then
// (atomically, package atomicfile), and the log beside it of the changes
// made since. It orders the writes of the base, so that a base never
// replaces a newer one, and trims the log after each. Its methods are
// safe for concurrent use.
type Store struct {
	path string
	log  *Log

	// mu orders writes of the base and guards the fields below.
	mu   sync.Mutex
	gen  uint64 // of the base
	size int64  // of the base
	// whole is set when the log no longer follows on from the base: the
	// next write must be the base.
	whole bool
	// newest is the newest generation written and acknowledged, base or
	// record: no base older than it is written, whole or not.
	newest uint64
	// offered is the newest generation the owner asked to write, base or
	// record, whether or not the write succeeded: while whole is set,
	// only a base at least that new makes the log follow on again (the
	// owner's next record follows on from it, not from an older base).
	offered uint64
	frozen  bool // see Freeze
	faults  Faults
}

// ErrFrozen is returned by the writes of a frozen Store (Freeze).
var ErrFrozen = errors.New("the store is handed over to another process: not writing")

// Freeze stops every write of the store, waiting for one under way (a
// base being written, a record being appended) to end: after it returns,
// this process writes neither file until Thaw, so that another may own
// them (a handover). Writes meanwhile return ErrFrozen.
func (s *Store) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = true
	s.log.mu.Lock()
	s.log.frozen = true
	s.log.mu.Unlock()
}

// Thaw lets the store write again after Freeze (a handover that failed:
// the files are still this process's).
func (s *Store) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = false
	s.log.mu.Lock()
	s.log.frozen = false
	s.log.mu.Unlock()
}

// ReadStore reads the base at path (an error wrapping fs.ErrNotExist when
// there is none) and the records of the log at logPath (see Read).
func ReadStore(path, logPath string) (base []byte, records []Record, err error) {
	base, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	records, _, err = Read(logPath)
	return base, records, err
}

// OpenStore opens the store of the base at path and the log at logPath,
// whose owner read them (ReadStore): the base is generation gen, of size
// bytes (0 and 0: none); whole says the log's records could not all be
// applied, so the next write must be the base.
func OpenStore(path, logPath string, gen uint64, size int64, whole bool) (*Store, error) {
	l, _, err := Open(logPath)
	if err != nil {
		return nil, err
	}
	return &Store{path: path, log: l, gen: gen, size: size, whole: whole, newest: max(gen, l.last)}, nil
}

// WriteBase writes data, the document at generation gen, as the base, and
// drops the log's records it holds (all of them, if the log did not follow
// on). A gen not above the generation written last is not written (a
// slower writer of an older document), unless the log needs a base; and
// a base that empties the log is never one below the newest generation
// acknowledged (a base or an appended record): that would take back a
// write that returned success.
func (s *Store) WriteBase(gen uint64, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		return fmt.Errorf("writing %s: %w", s.path, ErrFrozen)
	}
	if (gen <= s.gen && !s.whole) || (s.whole && gen < max(s.newest, s.offered)) {
		// Without whole, records above gen stay in the log (Trim); with
		// it, the log is emptied, so a gen below the newest acknowledged
		// one would take that one back, and one below the newest offered
		// would have the owner's next record follow on from a document
		// the files do not hold.
		return nil
	}
	s.offered = max(s.offered, gen)
	err := s.faults.at(StepBaseWrite, false)
	if err == nil {
		err = atomicfile.Write(s.path, data, 0o600)
	}
	if err != nil {
		// The owner's document moved on without its base: a record
		// appended next would follow on from a base the files lack.
		s.whole = true
		return err
	}
	s.gen, s.size, s.newest = gen, int64(len(data)), max(s.newest, gen)
	if err := s.faults.at(StepBaseWrite, true); err != nil {
		s.whole = true
		return err
	}
	trim := func() error { return s.log.Trim(gen) }
	if s.whole {
		trim = s.log.Reset // its records may not follow on from the base
	}
	if err := trim(); err != nil {
		// The base is whole and newer than the records: readers skip
		// them; a log that did not follow on still needs a Reset.
		return err
	}
	s.whole = false
	return nil
}

// Append logs a change that made generation gen, or returns ErrWhole when
// the base must be written instead. After a failed append the log no
// longer follows on from the documents that come next, so every Append
// returns ErrWhole until WriteBase succeeds.
func (s *Store) Append(gen uint64, payload []byte) error {
	s.mu.Lock()
	whole := s.whole
	if !s.frozen {
		s.offered = max(s.offered, gen)
	}
	s.mu.Unlock()
	if whole {
		return ErrWhole
	}
	err := s.log.Append(gen, payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(err, ErrFrozen) {
		return err // nothing was written: the log still follows on
	}
	if err != nil {
		s.whole = true
		return err
	}
	s.newest = max(s.newest, gen)
	return nil
}

// Due reports whether the log has outgrown half the base (and MinCompact):
// time to write the document whole.
func (s *Store) Due() bool {
	s.mu.Lock()
	size := s.size
	s.mu.Unlock()
	return s.log.Size() > max(size/2, MinCompact)
}

// LogSize is the bytes the log's records take.
func (s *Store) LogSize() int64 { return s.log.Size() }

// Close closes the log.
func (s *Store) Close() error { return s.log.Close() }
