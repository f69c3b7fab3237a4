// Package declsource receives the machine's declaration: from a file or a
// directory watched for changes, and from an HTTP endpoint the controller
// pushes to, on a unix socket or a loopback address only. Every document is
// parsed strictly by specjson.ParseDeclaration; a faulty one is refused whole and
// the previous declaration stays in force.
package declsource

import (
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

	"github.com/meshhost/meshhost/internal/plumbing/filewatch"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// ErrStale is returned for a declaration whose generation is not newer than
// the one in force.
var ErrStale = errors.New("declaration generation is not newer than the one in force")

// Source holds the newest valid declaration and tells a listener when it
// changes.
type Source struct {
	logger  *slog.Logger
	machine string // declarations for any other machine are refused
	reader  specjson.Reader
	changed chan struct{}

	// mu guards the fields below.
	mu      sync.Mutex
	current *spec.Declaration
	raw     []byte // the document current was parsed from; nil for initial
	origin  string // where current came from: a path, or "push"
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
}

// New returns a Source for cfg.
func New(cfg Config) *Source {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	initial := cfg.Initial
	if initial != nil && cfg.Machine != "" && initial.Machine != cfg.Machine {
		initial = nil // saved for another machine name: not ours to apply
	}
	return &Source{logger: logger.With("component", "declsource"), machine: cfg.Machine, reader: cfg.Reader, changed: make(chan struct{}, 1), current: initial}
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

// Offer parses data and puts it in force if it is valid and newer. The error
// names every fault; on error nothing changes.
func (s *Source) Offer(data []byte, origin string) (*spec.Declaration, error) {
	d, err := s.reader.ParseDeclaration(data)
	if err != nil {
		return nil, err
	}
	if s.machine != "" && d.Machine != s.machine {
		return nil, &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; this agent runs %q", d.Machine, s.machine)}
	}
	s.mu.Lock()
	if cur := s.current; cur != nil {
		if d.Machine != cur.Machine {
			s.mu.Unlock()
			return nil, &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; the declaration in force is for %q", d.Machine, cur.Machine)}
		}
		if d.Generation <= cur.Generation {
			s.mu.Unlock()
			if d.Generation == cur.Generation {
				return cur, nil // the same push twice is not a fault
			}
			return nil, fmt.Errorf("generation %d, in force %d: %w", d.Generation, cur.Generation, ErrStale)
		}
	}
	s.current, s.raw, s.origin = d, data, origin
	s.mu.Unlock()
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
			level = slog.LevelWarn
		}
		s.logger.Log(context.Background(), level, "declaration refused; the previous one stays in force", "path", file, "err", err)
	}
}
