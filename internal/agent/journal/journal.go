package journal

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/deltalog"
)

// Version is the format of the journal's entries.
//
// History:
//
//	1: first version: declarations/ and passes/, one JSON file per entry.
//	2: a declaration entry holds its roster's diff alone, no longer the
//	   whole declaration (a roster of 100,000 names made each 5 MB);
//	   roster_diff may say the change was not known ("unknown").
//	   Version 1 entries are read as they are.
//	3: rosters/: a roster that moved alone, the declaration's generation
//	   unchanged (a NATS roster change), is a RosterEntry named by its
//	   roster generation, holding its diff; the roster's history is the
//	   chain of the diffs of both kinds. Older entries are read as they
//	   are.
//	4: entries are appended to segments (NNN.log: deltalog records, one
//	   an entry, the file named by its first entry's key) instead of
//	   being files of their own: recording one is an append and an
//	   fsync. The entries' JSON is unchanged. Entry files of versions 1
//	   to 3 are read, and pruned, as they are; a meshhost older than 4
//	   does not see the entries in segments.
const Version = 4

// DefaultKeep is how many entries of each kind a journal keeps (and up to
// a segment more: pruning drops whole segments).
const DefaultKeep = 200

// DefaultMaxBytes bounds the bytes of each kind of entry: a version 1
// declaration entry carried its whole roster (about 5 MB at 100,000
// names), and a roster that changes whole still has a diff that size, so
// 200 of them could take a gigabyte. The newest entry is always kept.
const DefaultMaxBytes = 256 << 20

// ErrNotFound is returned for a generation the journal does not hold (never
// applied, or pruned).
var ErrNotFound = errors.New("not in the journal")

// ErrOlderGeneration is returned for a declaration older than the newest
// one recorded: generations never go backwards.
var ErrOlderGeneration = errors.New("generations never go backwards")

// Options configures a Journal.
type Options struct {
	// Keep is how many declarations, rosters and passes are kept, each:
	// at least Keep, and up to a segment (Keep/4) more, since the oldest
	// go a segment at a time. Default DefaultKeep.
	Keep int
	// MaxBytes bounds the bytes of the declarations kept, and of the passes
	// kept; the oldest go first. Default DefaultMaxBytes.
	MaxBytes int64
	// Logger reports damage found in the journal's files. Default
	// slog.Default().
	Logger *slog.Logger
	// Faults injects faults at the journal's write steps (tests); nil
	// means none.
	Faults Faults
}

// Step is one write the journal makes, named for fault injection
// (Options.Faults).
type Step int

// The write steps of recording an entry, in the order they are made.
const (
	StepAppendWrite Step = iota // the entry written to its segment
	StepAppendSync              // the segment synced after it
	StepSegmentSync             // the directory synced after a new segment
	StepPrune                   // the oldest segment removed
	NumSteps
)

// Faults is called before each write step (after false) and after it
// succeeds (after true); an error it returns is that step's error.
type Faults func(step Step, after bool) error

func (f Faults) at(step Step, after bool) error {
	if f == nil {
		return nil
	}
	return f(step, after)
}

// logFaults is f for the steps a segment's deltalog.Log makes.
func (f Faults) logFaults() deltalog.Faults {
	if f == nil {
		return nil
	}
	return func(step deltalog.Step, after bool) error {
		switch step {
		case deltalog.StepAppendWrite:
			return f(StepAppendWrite, after)
		case deltalog.StepAppendSync:
			return f(StepAppendSync, after)
		}
		return nil
	}
}

// Journal is a machine's history in a directory. It is safe for concurrent
// use by one process.
type Journal struct {
	dir      string
	keep     int
	maxBytes int64
	faults   Faults
	log      *slog.Logger

	// damagedMu guards damaged: the segments found corrupt, reported.
	damagedMu sync.Mutex
	damaged   map[string]bool

	// mu guards writes and the fields below.
	mu      sync.Mutex
	nextSeq uint64
	held    map[string]*held // per kind: see held
}

const (
	declarationsDir = "declarations"
	rostersDir      = "rosters"
	passesDir       = "passes"
)

// Open opens the journal in dir, creating it if needed.
func Open(dir string, opts Options) (*Journal, error) {
	j := &Journal{dir: dir, keep: cmp.Or(opts.Keep, DefaultKeep), maxBytes: cmp.Or(opts.MaxBytes, DefaultMaxBytes), faults: opts.Faults, log: cmp.Or(opts.Logger, slog.Default())}
	for _, sub := range []string{declarationsDir, rostersDir, passesDir} {
		// The owner's alone: declarations hold env and label values. A
		// journal made by an older meshhost (0750) is tightened.
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("opening journal: %w", err)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, declarationsDir), filepath.Join(dir, rostersDir), filepath.Join(dir, passesDir)} {
		if err := ownerOnly(d); err != nil {
			return nil, fmt.Errorf("opening journal: %w", err)
		}
	}
	j.mu.Lock()
	last, _, err := j.lastLocked(passesDir)
	j.mu.Unlock()
	if err != nil {
		return nil, err
	}
	j.nextSeq = last
	j.nextSeq++
	return j, nil
}

// ownerOnly makes directory d the owner's alone (0700), unless it is.
func ownerOnly(d string) error {
	fi, err := os.Stat(d)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() == 0o700 {
		return nil
	}
	return os.Chmod(d, 0o700)
}

// Entry is one line of the history: a declaration applied, a roster that
// moved alone, or a pass.
type Entry struct {
	Time        time.Time
	Declaration *DeclarationEntry // set for a declaration
	Roster      *RosterEntry      // set for a roster
	Pass        *PassEntry        // set for a pass
}

// String summarizes e on one line, for `meshhost history`.
func (e Entry) String() string {
	ts := e.Time.UTC().Format(time.RFC3339)
	if d := e.Declaration; d != nil {
		roster := fmt.Sprintf("roster %d", d.RosterGeneration)
		if d.RosterServed != 0 {
			roster = fmt.Sprintf("roster %d held (roster %d serves until meshhost roster accept %d)", d.RosterGeneration, d.RosterServed, d.RosterGeneration)
		}
		s := fmt.Sprintf("%s declaration %d: %s, %d containers, mesh_names %s", ts, d.Generation, roster, d.Containers, d.MeshNames)
		return s + namesChanged(d.RosterDiff, false)
	}
	if r := e.Roster; r != nil {
		return fmt.Sprintf("%s roster %d (declaration %d)", ts, r.RosterGeneration, r.Generation) + namesChanged(r.RosterDiff, true)
	}
	return e.Pass.String(ts)
}

// String summarizes p on one line, after ts: what it did, then what it
// deferred, froze and failed of its plan, each counted by kind, never
// one for the other (a pass whose every action the budget deferred did
// nothing), then a hold it met or released.
func (p *PassEntry) String(ts string) string {
	return fmt.Sprintf("%s pass %d:", ts, p.Seq) + p.describe(true)
}

// Summary says what p did, as String does, without its time, number and
// duration: "did nothing; deferred by the budget: 3 replace".
func (p *PassEntry) Summary() string {
	return strings.TrimPrefix(p.describe(false), " ")
}

// describe is String's text after the pass's number, with its duration
// when dur.
func (p *PassEntry) describe(dur bool) string {
	var did, deferred, frozen, failed []Action
	for _, a := range p.Actions {
		switch {
		case a.Err != "":
			failed = append(failed, a)
		case a.Deferred:
			deferred = append(deferred, a)
		case a.Frozen:
			frozen = append(frozen, a)
		default:
			did = append(did, a)
		}
	}
	s := ""
	for i, h := range p.Holds {
		if i > 0 {
			s += ";"
		}
		s += fmt.Sprintf(" %s (%s releases it)", h, h.Command())
	}
	if len(p.Holds) > 0 && (len(p.Actions) > 0 || p.Stopped()) {
		s += ";"
	}
	switch {
	case p.Stopped():
		s += " nothing applied"
	case len(did) == 0 && len(p.Actions) > 0:
		s += " did nothing"
	case len(did) > 0:
		s += " did " + byKind(did)
	}
	bare := len(p.Actions) == 0 && len(p.Holds) == 0 && len(p.Released) > 0
	if dur && !bare && (len(p.Actions) > 0 || len(p.Holds) == 0) {
		s += fmt.Sprintf(" in %v", p.Duration.Round(time.Millisecond))
	}
	if len(deferred) > 0 {
		s += "; deferred by the budget: " + byKind(deferred)
	} else if p.Deferred > 0 {
		s += fmt.Sprintf("; %d deferred", p.Deferred)
	}
	if len(frozen) > 0 {
		s += "; frozen: " + byKind(frozen)
	}
	if len(failed) > 0 {
		s += "; failed: " + byKind(failed)
	}
	for i, r := range p.Released {
		sep := "; "
		if (bare || !dur && len(p.Actions) == 0 && len(p.Holds) == 0) && i == 0 {
			sep = " "
		}
		s += sep + r.Released()
	}
	return s
}

// byKind counts actions by kind: "2 create, 1 replace".
func byKind(actions []Action) string {
	counts := map[string]int{}
	for _, a := range actions {
		counts[a.Kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	return strings.Join(parts, ", ")
}

// namesChanged says what d changed, after an entry's summary; always
// says something when the summary alone would not.
func namesChanged(d Diff, always bool) string {
	switch {
	case d.Unknown:
		return "; names changed (not recorded)"
	case !d.Empty() || always:
		return fmt.Sprintf("; names +%d -%d ~%d", len(d.Added), len(d.Removed), len(d.Moved))
	}
	return ""
}

// History returns every entry the journal holds, oldest first.
func (j *Journal) History() ([]Entry, error) {
	decls, err := j.Declarations()
	if err != nil {
		return nil, err
	}
	rosters, err := j.Rosters()
	if err != nil {
		return nil, err
	}
	passes, err := j.Passes()
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(decls)+len(rosters)+len(passes))
	for i := range decls {
		out = append(out, Entry{Time: decls[i].Time, Declaration: &decls[i]})
	}
	for i := range rosters {
		out = append(out, Entry{Time: rosters[i].Time, Roster: &rosters[i]})
	}
	for i := range passes {
		out = append(out, Entry{Time: passes[i].Time, Pass: &passes[i]})
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return a.Time.Compare(b.Time) })
	return out, nil
}
