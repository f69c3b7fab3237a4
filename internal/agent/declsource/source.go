// Package declsource receives the machine's declaration: from a file or a
// directory watched for changes, and from an HTTP endpoint the controller
// pushes to, on a unix socket or a loopback address only. Every document is
// parsed strictly by specjson.ParseDeclaration; a faulty one is refused whole and
// the previous declaration stays in force.
package declsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/plumbing/filewatch"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// ErrStale is matched by the refusal of a declaration whose generation is
// older than the one in force (a *ConflictError).
var ErrStale = errors.New("declaration generation is older than the one in force")

// Source holds the newest valid declaration and tells a listener when it
// changes.
type Source struct {
	logger  *slog.Logger
	machine string // declarations for any other machine are refused
	reader  specjson.Reader
	changed chan struct{}
	refused *prometheus.CounterVec // by Refusal

	// mu guards the fields below.
	mu      sync.Mutex
	current *spec.Declaration
	raw     []byte       // the document current was parsed from; nil for initial
	origin  string       // where current came from: a path, or "push"
	served  *spec.Roster // the roster the resolver serves (SetServed); nil: unknown
}

// Config is what a Source needs; the zero Config accepts any machine's
// declarations.
type Config struct {
	// Machine names this machine: declarations for another are refused.
	// Empty accepts any machine's.
	Machine string
	// Initial, if not nil, is in force until a newer one arrives (the
	// agent passes the declaration it saved last time).
	Initial *spec.Declaration
	// Reader parses every document; its Busy lets a large roster's parse
	// step aside for the in-process resolver's queries.
	Reader specjson.Reader
	// Logger receives what the Source accepts and refuses; nil discards.
	Logger *slog.Logger
	// Registerer receives meshhost_agent_declarations_refused_total. Nil
	// registers none.
	Registerer prometheus.Registerer
}

// New returns a Source for cfg. It panics if cfg.Registerer already holds
// the Source's metric (one Source per registry).
func New(cfg Config) *Source {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	initial := cfg.Initial
	if initial != nil && cfg.Machine != "" && initial.Machine != cfg.Machine {
		initial = nil // saved for another machine name: not ours to apply
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshhost_agent_declarations_refused_total",
		Help: "Declarations refused (pushed or read from a file), by reason: invalid, too_large, other_machine, older_generation, generation_reused, roster_older, roster_generation_reused.",
	}, []string{"reason"})
	for _, r := range refusals { // every reason at 0 from the start
		refused.WithLabelValues(string(r))
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(refused)
	}
	return &Source{logger: logger.With("component", "declsource"), machine: cfg.Machine, reader: cfg.Reader,
		changed: make(chan struct{}, 1), refused: refused, current: initial}
}

// SetServed tells the Source which roster the resolver serves (the agent
// calls it whenever that changes): a declaration whose roster is older, or
// has its generation with other names, is refused (ErrConflict).
func (s *Source) SetServed(r *spec.Roster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served = r
}

// Current returns the declaration in force (nil before the first) and where
// it came from.
func (s *Source) Current() (*spec.Declaration, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, s.origin
}

// Document returns the bytes the declaration in force was parsed from, or
// nil when it was not parsed here (the initial one).
func (s *Source) Document() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw
}

// Changed is signalled (coalesced) whenever a new declaration is in force.
func (s *Source) Changed() <-chan struct{} { return s.changed }

// Offer parses data and puts it in force if it is valid and newer. The same
// declaration again (the generation in force, the same content) changes
// nothing and is no fault. The error names every fault, and matches
// ErrConflict (ErrStale too, for an older generation) when the declaration
// contradicts what is in force: an older generation; the generation in
// force with other content; a roster older than the one served (or in
// force), or with its generation and other names. On error nothing
// changes, and the refusal is counted by its Refusal.
func (s *Source) Offer(data []byte, origin string) (*spec.Declaration, error) {
	d, err := s.offer(data, origin)
	if err != nil {
		s.refused.WithLabelValues(string(refusalOf(err))).Inc()
	}
	return d, err
}

func (s *Source) offer(data []byte, origin string) (*spec.Declaration, error) {
	if err := specjson.CheckSize(int64(len(data))); err != nil {
		return nil, &refused{RefusedTooLarge, err}
	}
	d, err := s.reader.ParseDeclaration(data)
	if err != nil {
		return nil, err
	}
	if s.machine != "" && d.Machine != s.machine {
		return nil, &refused{RefusedOtherMachine, &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; this agent runs %q", d.Machine, s.machine)}}
	}
	for {
		// Judged outside the lock (a roster of 100,000 names takes
		// milliseconds to compare), then put in force only if nothing
		// came into force meanwhile.
		s.mu.Lock()
		cur, raw, served := s.current, s.raw, s.served
		s.mu.Unlock()
		if cur != nil && d.Machine != cur.Machine {
			return nil, &refused{RefusedOtherMachine, &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; the declaration in force is for %q", d.Machine, cur.Machine)}}
		}
		if cur != nil && d.Generation == cur.Generation && raw != nil && bytes.Equal(data, raw) {
			return cur, nil // the same push twice
		}
		same, err := checkGenerations(d, cur, served)
		if err != nil {
			return nil, err
		}
		if same {
			return cur, nil
		}
		s.mu.Lock()
		if s.current != cur || s.served != served {
			s.mu.Unlock()
			continue
		}
		s.current, s.raw, s.origin = d, data, origin
		s.mu.Unlock()
		break
	}
	s.logger.Info("declaration accepted", "origin", origin, "machine", d.Machine, "declaration_generation", d.Generation,
		"roster_generation", d.Roster.Generation, "containers", len(d.Containers), "mesh_names", d.MeshNames)
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return d, nil
}

// WatchPath reads the declaration at path, a file or a directory, and again
// whenever it changes, until ctx ends. In a directory the last *.json file by
// name is the declaration (so a controller can write gen-000042.json). A
// faulty or stale file is logged and ignored; the previous declaration stays.
func (s *Source) WatchPath(ctx context.Context, path string) error {
	info, err := os.Stat(path)
	if err != nil {
		// An unreachable source (a directory not mounted yet, a file not
		// written yet) is no reason to stop the agent: the declaration in
		// force stays, and the path is tried again until it appears.
		s.logger.Error("declaration path unreachable; the declaration in force stays, retrying every second", "path", path, "err", err)
		for err != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			info, err = os.Stat(path)
		}
		s.logger.Info("declaration path is back", "path", path)
	}
	w, err := filewatch.New(path)
	if err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	s.readPath(path, info.IsDir())
	w.Run(ctx, 100*time.Millisecond, func() { s.readPath(path, info.IsDir()) })
	return nil
}

// ReadPath reads the declaration at path (a file, or a directory whose
// last *.json file is the declaration) now, as WatchPath does on a change:
// on SIGHUP, say.
func (s *Source) ReadPath(path string) {
	info, err := os.Stat(path)
	if err != nil {
		s.logger.Error("declaration path unreachable; the declaration in force stays", "path", path, "err", err)
		return
	}
	s.readPath(path, info.IsDir())
}

func (s *Source) readPath(path string, isDir bool) {
	file := path
	if isDir {
		entries, err := os.ReadDir(path)
		if err != nil {
			s.logger.Error("reading declaration directory", "path", path, "err", err)
			return
		}
		var names []string
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
		if len(names) == 0 {
			return
		}
		slices.Sort(names)
		file = filepath.Join(path, names[len(names)-1])
	}
	if fi, err := os.Stat(file); err == nil {
		if err := specjson.CheckSize(fi.Size()); err != nil { // refused before it is read
			s.refused.WithLabelValues(string(RefusedTooLarge)).Inc()
			s.logger.Error("declaration refused; the previous one stays in force", "path", file, "err", err)
			return
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.logger.Error("reading declaration", "path", file, "err", err)
		}
		return
	}
	if _, err := s.Offer(data, file); err != nil {
		level := slog.LevelError
		if errors.Is(err, ErrStale) {
			level = slog.LevelWarn // an old file left in the directory
		}
		s.logger.Log(context.Background(), level, "declaration refused; the previous one stays in force", "path", file, "refusal", refusalOf(err), "err", err)
	}
}
