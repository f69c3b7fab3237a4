package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestPriorities(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, Options{Level: slog.LevelDebug, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("d", "k", 1)
	log.Info("i")
	log.Warn("w")
	log.Error("e", "err", "multi\nline")
	log.Log(context.Background(), slog.LevelError+4, "above error")
	want := []string{`<7>level=DEBUG msg=d k=1`, `<6>level=INFO msg=i`, `<4>level=WARN msg=w`,
		`<3>level=ERROR msg=e err="multi\nline"`, `<3>level=ERROR+4 msg="above error"`}
	if got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("journal lines:\n%s\nwant (one per record, no time: the journal stamps them):\n%s", buf.String(), strings.Join(want, "\n"))
	}
}

func TestJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, Options{Format: JSON, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	log.With("component", "agent").Error("pass failed", "err", "boom")
	line := buf.String()
	if !strings.HasPrefix(line, "<3>{") {
		t.Fatalf("JSON line under the journal = %q, want <3>{...}", line)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "<3>")), &m); err != nil {
		t.Fatal(err)
	}
	if m["msg"] != "pass failed" || m["component"] != "agent" || m["err"] != "boom" || m["time"] != nil {
		t.Errorf("JSON record = %v", m)
	}
}

// TestPlain: outside the journal, lines are slog's own, time included.
func TestPlain(t *testing.T) {
	for _, format := range []string{"", Text, JSON} {
		var buf bytes.Buffer
		log, err := New(&buf, Options{Format: format})
		if err != nil {
			t.Fatal(err)
		}
		log.Error("e")
		if strings.HasPrefix(buf.String(), "<") || !strings.Contains(buf.String(), "time") {
			t.Errorf("format %q outside the journal: %q, want no prefix and a time", format, buf.String())
		}
	}
	if _, err := New(&bytes.Buffer{}, Options{Format: "yaml"}); err == nil {
		t.Error(`New(Format "yaml") succeeded, want an error`)
	}
}

func TestContextAttrs(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(&buf, Options{})
	ctx := WithAttrs(context.Background(), "pass", 7)
	ctx = WithAttrs(ctx, slog.Uint64("declaration_generation", 3))
	log.With("component", "reconcile").InfoContext(ctx, "reconcile action", "container", "db")
	log.Info("no context")
	log.InfoContext(ctx, "its own", "pass", 8)
	lines := strings.Split(buf.String(), "\n")
	if !strings.Contains(lines[0], "component=reconcile container=db pass=7 declaration_generation=3") {
		t.Errorf("line with the pass's context = %q", lines[0])
	}
	if strings.Contains(lines[1], "pass=") {
		t.Errorf("line without it = %q", lines[1])
	}
	if !strings.Contains(lines[2], "pass=8 declaration_generation=3") || strings.Count(lines[2], "pass=") != 1 {
		t.Errorf("line naming its own pass = %q, want its pass=8 alone", lines[2])
	}
}

// TestConcurrent: records logged at once never swap prefixes or share a line.
func TestConcurrent(t *testing.T) {
	var buf bytes.Buffer
	log, _ := New(&buf, Options{Journal: true, Level: slog.LevelDebug})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if g%2 == 0 {
					log.Error("e", "i", i)
				} else {
					log.Info("i", "i", i)
				}
			}
		}()
	}
	wg.Wait()
	for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if !(strings.HasPrefix(l, "<3>level=ERROR msg=e ") || strings.HasPrefix(l, "<6>level=INFO msg=i ")) {
			t.Fatalf("line %q: prefix and record disagree", l)
		}
	}
}

func TestJournald(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stream")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "JOURNAL_STREAM" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name, value string
		want        bool
	}{
		{"this stream", fmt.Sprintf("%d:%d", st.Dev, st.Ino), true},
		{"another inode (stderr redirected since)", fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), false},
		{"unset", "", false},
		{"garbage", "x:y", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Journald(f, env(tc.value)); got != tc.want {
				t.Errorf("Journald with JOURNAL_STREAM=%q = %v, want %v", tc.value, got, tc.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	var buf bytes.Buffer
	if _, err := (Flags{Format: "xml", Level: "info"}).Logger(&buf); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format xml: %v, want an error naming the flag", err)
	}
	if _, err := (Flags{Format: "text", Level: "loud"}).Logger(&buf); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("--log-level loud: %v, want an error naming the flag", err)
	}
	log, err := (Flags{Format: "json", Level: "warn"}).Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept")
	if strings.Contains(buf.String(), "dropped") || !strings.Contains(buf.String(), `"msg":"kept"`) {
		t.Errorf("--log-format json --log-level warn wrote %q", buf.String())
	}
}

// TestDurationsInSeconds: every duration, however a line passes it (an
// argument, an attribute of With, of the context, in a group), is written
// in seconds under a key ending in _seconds, in both formats, under the
// journal or not.
func TestDurationsInSeconds(t *testing.T) {
	for _, tc := range []struct {
		format  string
		journal bool
	}{{JSON, false}, {JSON, true}, {Text, false}, {Text, true}} {
		t.Run(fmt.Sprintf("%s journal=%t", tc.format, tc.journal), func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, Options{Format: tc.format, Journal: tc.journal})
			if err != nil {
				t.Fatal(err)
			}
			ctx := WithAttrs(context.Background(), "waited", 3*time.Second)
			log.With("interval", 30*time.Second).InfoContext(ctx, "x",
				"took", 1500*time.Millisecond, "duration_seconds", 250*time.Millisecond,
				slog.Group("probe", slog.Duration("latency", 2*time.Millisecond)), "count", 3)
			line := strings.TrimSpace(strings.TrimPrefix(buf.String(), "<6>"))
			want := map[string]any{"interval_seconds": 30.0, "took_seconds": 1.5, "duration_seconds": 0.25,
				"waited_seconds": 3.0, "probe.latency_seconds": 0.002, "count": 3.0}
			got := map[string]any{}
			if tc.format == JSON {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				for k, v := range m {
					if g, ok := v.(map[string]any); ok {
						for gk, gv := range g {
							got[k+"."+gk] = gv
						}
						continue
					}
					got[k] = v
				}
			} else {
				for _, f := range strings.Fields(line) {
					k, v, _ := strings.Cut(f, "=")
					if n, err := strconv.ParseFloat(v, 64); err == nil {
						got[k] = n
					} else {
						got[k] = v
					}
				}
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v; line: %s", k, got[k], v, line)
				}
			}
			for _, k := range []string{"interval", "took", "waited", "probe.latency"} {
				if _, ok := got[k]; ok {
					t.Errorf("%s written without _seconds; line: %s", k, line)
				}
			}
		})
	}
}

// TestParseLevel: the operator's spellings are taken (warning, the syslog
// one, among them); an unknown word is refused naming the likely level.
func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want slog.Level
		err  string
	}{
		{in: "debug", want: slog.LevelDebug},
		{in: "INFO", want: slog.LevelInfo},
		{in: "warn", want: slog.LevelWarn},
		{in: "warning", want: slog.LevelWarn},
		{in: "Warning", want: slog.LevelWarn},
		{in: "error", want: slog.LevelError},
		{in: "warn+1", want: slog.LevelWarn + 1},
		{in: "wrn", err: `"wrn" is not a log level: want debug, info, warn (or warning) or error (did you mean warn?)`},
		{in: "erorr", err: "did you mean error?"},
		{in: "loud", err: `"loud" is not a log level`},
		{in: "", err: "is not a log level"},
	} {
		got, err := ParseLevel(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseLevel(%q) = %v, %v; want an error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
