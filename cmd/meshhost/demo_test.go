package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/demo"
	"github.com/meshhost/meshhost/spec"
)

// runCLI runs a meshhost command in-process.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &environment{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	code = run(context.Background(), e, args)
	return code, out.String(), errb.String()
}

func TestDemoJSON(t *testing.T) {
	code, out, stderr := runCLI(t, nil, "demo", "--output", "json")
	if code != 0 {
		t.Fatalf("meshhost demo --output json = exit %d\n%s", code, stderr)
	}
	var rows []demo.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("decoding the rows: %v\n%s", err, out)
	}
	if len(rows) != 8 {
		t.Fatalf("got %d rows, want 4 actions x 2 modes", len(rows))
	}
	for _, r := range rows {
		total := 0
		for _, n := range r.Replaced {
			total += n
		}
		switch r.Mode {
		case spec.Copy:
			// The incident: every container on every machine, about 61.
			if r.Replaced["novox"] < 40 || total < 55 {
				t.Errorf("%s (copy): replaced %v, want every container on every machine", r.Action, r.Replaced)
			}
		case spec.Resolve:
			if total != 0 {
				t.Errorf("%s (resolve): replaced %v, want none", r.Action, r.Replaced)
			}
		}
		if len(r.Replaced) != 4 {
			t.Errorf("%s (%s): replaced lists %d machines, want all 4", r.Action, r.Mode, len(r.Replaced))
		}
	}
	if rows[5].Action != "assign searxng to ace" || rows[5].Created["ace"] != 1 {
		t.Errorf("row 5 = %+v, want searxng created on ace", rows[5])
	}
}

// TestExitCodes: one table for every command (the README's): 0 ok, 1
// error, 2 the plan has changes, 3 a probe failed, 64 usage; help goes to
// stdout.
func TestExitCodes(t *testing.T) {
	if code, out, _ := runCLI(t, nil); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("meshhost (no command) = exit %d, want 0 and the help on stdout:\n%s", code, out)
	}
	if code, out, _ := runCLI(t, nil, "plan", "--help"); code != 0 || !strings.Contains(out, "--hold-above") {
		t.Errorf("meshhost plan --help = exit %d, want 0 and the flags on stdout:\n%s", code, out)
	}
	for _, args := range [][]string{
		{"no-such-command"},
		{"demo", "--output", "yaml"},
		{"demo", "--no-such-flag"},
		{"explain"},
		{"approve", "x"},
		{"migrate", "sideways"},
	} {
		if code, _, _ := runCLI(t, nil, args...); code != 64 {
			t.Errorf("meshhost %v = exit %d, want 64 (usage)", args, code)
		}
	}
	code, out, _ := runCLI(t, nil, "version", "--output", "json")
	if code != 0 || !strings.Contains(out, `"digest_version":"v1"`) {
		t.Errorf("meshhost version --output json = exit %d, %s", code, out)
	}
}

// TestManAndCompletion: make man writes a page per command, from the
// commands (their flags included); completion scripts come for bash, zsh
// and fish.
func TestManAndCompletion(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := runCLI(t, nil, "man", "--dir", dir); code != 0 {
		t.Fatalf("meshhost man = %d %s%s", code, out, errOut)
	}
	for name := range commands {
		if commands[name].hidden {
			continue
		}
		page, err := os.ReadFile(filepath.Join(dir, "meshhost-"+name+".1"))
		if err != nil {
			t.Errorf("no man page for %s: %v", name, err)
			continue
		}
		if name == "plan" && !strings.Contains(string(page), "--hold-above") {
			t.Errorf("meshhost-plan.1 does not list --hold-above:\n%s", page)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if code, out, _ := runCLI(t, nil, "completion", shell); code != 0 || !strings.Contains(out, "meshhost") {
			t.Errorf("meshhost completion %s = %d, %d bytes", shell, code, len(out))
		}
	}
	if code, out, _ := runCLI(t, nil, "--version"); code != 0 || !strings.HasPrefix(out, "meshhost ") {
		t.Errorf("meshhost --version = %d %q", code, out)
	}
}
