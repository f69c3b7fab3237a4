// Package logging makes the slog loggers meshhost's processes write to
// stderr: text or JSON lines (--log-format) at a level (--log-level), and,
// when stderr is connected to systemd's journal, each line prefixed with its
// syslog priority as sd-daemon(3) describes (<3> for errors, <4> warnings,
// <6> info, <7> debug) and without a time of its own (the journal stamps
// every line), so that `journalctl -p err -u meshhost-agent` shows exactly
// the errors.
//
// It also carries attributes in a context (WithAttrs): every line logged
// with that context (InfoContext and the like) gets them, so the lines of
// one agent pass, the reconciler's among them, all name the pass.
//
// The field names every meshhost process uses for the same things:
//
//	pass                    the agent pass a line belongs to (its number since the agent started)
//	declaration_generation  a declaration's generation
//	roster_generation       a roster's generation
//	container               a container's name
//	network                 a runtime network's name
//	duration_seconds        how long something took, in seconds
//	retry_in_seconds        how long until something is tried again, in seconds
//
// Every duration is written in seconds (a number, fractions allowed) under
// a key ending in _seconds: calls pass d.Seconds() under such a key (so a
// library's line reads the same under any handler), and the handlers New
// makes write any time.Duration that still comes as seconds too, its key
// given the suffix (took=250ms is written took_seconds=0.25), never as
// slog's nanoseconds (JSON) or Go's "250ms" (text), so that one query reads
// every component's durations.
package logging

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Formats --log-format takes.
const (
	Text = "text"
	JSON = "json"
)

// Options say how New writes.
type Options struct {
	Format string       // Text (the default) or JSON
	Level  slog.Leveler // the least severe level written (a *slog.LevelVar to change it later); nil: info
	// Journal prefixes each line with its syslog priority and leaves the
	// time out. New sets it for a stderr connected to the journal
	// (Journald); set it to force it.
	Journal bool
}

// New returns a logger writing one line per record to w. When w is the
// process's stderr connected to systemd's journal (Journald), lines carry
// their priority whatever Options.Journal says.
func New(w io.Writer, o Options) (*slog.Logger, error) {
	if f, ok := w.(*os.File); ok && Journald(f, os.Getenv) {
		o.Journal = true
	}
	ho := &slog.HandlerOptions{Level: o.Level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return Seconds(a) }}
	var pw *priorityWriter
	if o.Journal {
		pw = &priorityWriter{w: w}
		w = pw
		ho.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{} // the journal stamps every line
			}
			return Seconds(a)
		}
	}
	var h slog.Handler
	switch o.Format {
	case "", Text:
		h = slog.NewTextHandler(w, ho)
	case JSON:
		h = slog.NewJSONHandler(w, ho)
	default:
		return nil, fmt.Errorf("log format %q: want text or json", o.Format)
	}
	return slog.New(&handler{inner: h, pw: pw}), nil
}

// Seconds returns a with a duration value written as seconds, under a key
// ending in _seconds (the package doc); any other attribute unchanged.
func Seconds(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	if v.Kind() != slog.KindDuration {
		return a
	}
	key := a.Key
	if !strings.HasSuffix(key, "_seconds") {
		key += "_seconds"
	}
	return slog.Float64(key, v.Duration().Seconds())
}

// Journald reports whether f is connected to systemd's journal: systemd
// sets JOURNAL_STREAM to the device and inode of the stream it connected
// to stdout and stderr ("DEV:INODE"), and f must be that stream, not a
// file or pipe it was redirected to since.
func Journald(f *os.File, getenv func(string) string) bool {
	dev, ino, ok := strings.Cut(getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	d, err1 := strconv.ParseUint(dev, 10, 64)
	i, err2 := strconv.ParseUint(ino, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == d && st.Ino == i
}

// ErrorPrefix returns "<3>" when w is the process's stderr connected to
// systemd's journal (Journald), "" otherwise: the prefix of the one line a
// command writes itself, not through a logger, when it ends with an error,
// so that `journalctl -p err` shows why a service stopped too.
func ErrorPrefix(w io.Writer, getenv func(string) string) string {
	if f, ok := w.(*os.File); ok && Journald(f, getenv) {
		return "<3>"
	}
	return ""
}

// LoggedError is an error a command has logged already, through its
// logger (in JSON mode, as a JSON line): whoever prints a command's error
// prints nothing more for it.
type LoggedError struct{ Err error }

func (e *LoggedError) Error() string { return e.Err.Error() }
func (e *LoggedError) Unwrap() error { return e.Err }

// IsLogged reports whether err, or an error it wraps, is a LoggedError.
func IsLogged(err error) bool {
	var l *LoggedError
	return errors.As(err, &l)
}

// Priority returns the syslog priority of level l: 3 (err) from Error up,
// 4 (warning) from Warn, 6 (info) from Info, 7 (debug) below.
func Priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

// ParseLevel reads a log level as an operator writes it: debug, info,
// warn or error in any case (slog's names, with its offsets such as
// "warn+2"), and warning, the syslog spelling, for warn. An unknown word
// is refused naming the levels, and the one it was likely meant to be.
func ParseLevel(s string) (slog.Level, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "warning") {
		t = "warn"
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(t)); err == nil {
		return l, nil
	}
	err := fmt.Errorf("%q is not a log level: want debug, info, warn (or warning) or error", s)
	for _, name := range []string{"debug", "info", "warn", "error"} {
		// The four begin with four letters: the first names the one meant.
		if t != "" && strings.EqualFold(t[:1], name[:1]) {
			return 0, fmt.Errorf("%w (did you mean %s?)", err, name)
		}
	}
	return 0, err
}

// Flags are --log-format and --log-level, for a command's flag set.
type Flags struct {
	Format string
	Level  string
}

// Register adds --log-format and --log-level to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	f.RegisterFormat(fs)
	fs.StringVar(&f.Level, "log-level", "info", "least severe level logged: debug, info, warn or error")
}

// RegisterFormat adds --log-format alone to fs, for a command that has a
// --log-level of its own.
func (f *Flags) RegisterFormat(fs *flag.FlagSet) {
	fs.StringVar(&f.Format, "log-format", Text, "log line format: text or json (under systemd's journal, each line carries its priority either way)")
}

// Logger returns the logger the flags ask for, writing to w (see New).
func (f Flags) Logger(w io.Writer) (*slog.Logger, error) {
	level, err := ParseLevel(f.Level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l, err := New(w, Options{Format: f.Format, Level: level})
	if err != nil {
		return nil, fmt.Errorf("--log-format: %w", err)
	}
	return l, nil
}

// ctxKey is the context key of WithAttrs' attributes.
type ctxKey struct{}

// WithAttrs returns ctx carrying args (key-value pairs or slog.Attrs, as
// slog.Logger.With takes them) besides those it carries already: loggers
// New made add them to every line logged with the context.
func WithAttrs(ctx context.Context, args ...any) context.Context {
	prev, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	r := slog.NewRecord(time.Time{}, 0, "", 0)
	r.Add(args...)
	attrs := make([]slog.Attr, 0, len(prev)+r.NumAttrs())
	attrs = append(attrs, prev...)
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	return context.WithValue(ctx, ctxKey{}, attrs)
}

// Attrs returns the attributes ctx carries (WithAttrs).
func Attrs(ctx context.Context) []slog.Attr {
	a, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	return a
}

// handler adds a context's attributes to its records and, under the
// journal, has its writer prefix each line with the record's priority.
type handler struct {
	inner slog.Handler
	pw    *priorityWriter // nil: no prefix
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if attrs := Attrs(ctx); len(attrs) > 0 {
		r = withContextAttrs(r, attrs)
	}
	if h.pw == nil {
		return h.inner.Handle(ctx, r)
	}
	// The inner handler writes each record with one Write; the prefix is
	// the record's, so the two go together.
	h.pw.mu.Lock()
	defer h.pw.mu.Unlock()
	h.pw.prio = Priority(r.Level)
	return h.inner.Handle(ctx, r)
}

// withContextAttrs returns r with the context's attributes added, but for
// those whose key the record names itself: a line may say more precisely
// what its own fields mean.
func withContextAttrs(r slog.Record, attrs []slog.Attr) slog.Record {
	own := make(map[string]bool, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		own[a.Key] = true
		return true
	})
	r = r.Clone()
	for _, a := range attrs {
		if !own[a.Key] {
			r.AddAttrs(a)
		}
	}
	return r
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{inner: h.inner.WithAttrs(attrs), pw: h.pw}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{inner: h.inner.WithGroup(name), pw: h.pw}
}

// priorityWriter writes each line with the priority prefix of the record
// being handled.
type priorityWriter struct {
	w io.Writer
	// mu guards the fields below, and serializes records: held by
	// handler.Handle around the inner handler's Write.
	mu   sync.Mutex
	prio int
	buf  []byte
}

func (p *priorityWriter) Write(b []byte) (int, error) {
	p.buf = append(append(append(p.buf[:0], '<'), strconv.Itoa(p.prio)...), '>')
	p.buf = append(p.buf, b...)
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return len(b), nil
}
