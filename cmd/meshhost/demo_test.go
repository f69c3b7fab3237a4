package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// TestExitCodes: one table for every command (docs/operator.md's, "The command line"): 0 ok, 1
// error (a dependency missing, as podman's socket, included), 2 the plan
// has changes, 3 a probe failed, 64 usage; help goes to stdout. Exit 2
// and 3 need a runtime: TestGoldenJSON and the podman tests check them.
func TestExitCodes(t *testing.T) {
	state := t.TempDir()
	decl := filepath.Join(t.TempDir(), "declaration.json")
	if err := os.WriteFile(decl, controlsDecl(1, "busybox:1"), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(state, "typo")
	const noPodman = "no podman socket"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string // a substring of stdout, when not ""
		stderr string // a substring of stderr, when not ""
	}{
		{name: "no command", args: nil, code: 0, stdout: "Available Commands"},
		{name: "help", args: []string{"plan", "--help"}, code: 0, stdout: "--hold-above"},
		{name: "version", args: []string{"version"}, code: 0},
		{name: "completion", args: []string{"completion", "bash"}, code: 0, stdout: "meshhost"},

		{name: "unknown command", args: []string{"no-such-command"}, code: 64},
		{name: "unknown flag", args: []string{"demo", "--no-such-flag"}, code: 64},
		{name: "unknown output", args: []string{"demo", "--output", "yaml"}, code: 64},
		{name: "an argument missing", args: []string{"explain"}, code: 64},
		{name: "a bad argument", args: []string{"approve", "x"}, code: 64},
		{name: "an unknown subcommand", args: []string{"migrate", "sideways"}, code: 64},
		{name: "completion of an unknown shell", args: []string{"completion", "bogus"}, code: 64, stderr: `invalid argument "bogus"`},
		{name: "completion of no shell", args: []string{"completion"}, code: 64},

		{name: "plan without podman", args: []string{"plan", "--state", state, "--declaration", decl, "--resolver", "embedded"}, code: 1, stderr: noPodman},
		{name: "explain without podman", args: []string{"explain", "web", "--state", state, "--declaration", decl, "--resolver", "embedded"}, code: 1, stderr: noPodman},
		{name: "plan without the roster in force", args: []string{"plan", "--state", state, "--declaration", decl}, code: 1, stderr: "no plan without the roster in force"},
		{name: "probe without podman", args: []string{"probe"}, code: 1, stderr: noPodman},
		{name: "dns-check without podman", args: []string{"dns-check", "web", "a.internal", "--state", state}, code: 1, stderr: noPodman},
		{name: "agent without podman", args: []string{"agent", "--state", state}, code: exitConfig, stderr: noPodman},

		{name: "status, no state directory", args: []string{"status", "--state", typo}, code: 1, stderr: "does not exist"},
		{name: "dns-check, no state directory", args: []string{"dns-check", "web", "a.internal", "--state", typo}, code: 1, stderr: "does not exist"},
		{name: "probe, no state directory", args: []string{"probe", "--state", typo}, code: 1, stderr: "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, tc.args...)
			if code != tc.code {
				t.Errorf("meshhost %v = exit %d, want %d\n%s%s", tc.args, code, tc.code, out, errOut)
			}
			if !strings.Contains(out, tc.stdout) {
				t.Errorf("meshhost %v: stdout does not say %q:\n%s", tc.args, tc.stdout, out)
			}
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("meshhost %v: stderr does not say %q:\n%s", tc.args, tc.stderr, errOut)
			}
		})
	}
	if _, err := os.Stat(typo); err == nil {
		t.Error("a command made the state directory it was given")
	}
	code, out, _ := runCLI(t, nil, "version", "--output", "json")
	if code != 0 || !strings.Contains(out, `"digest_version":"v2"`) {
		t.Errorf("meshhost version --output json = exit %d, %s", code, out)
	}
}

// TestJSONErrorListsEveryFault: with --output json, an error lists every
// fault of a declaration, though the error says which file it came from
// (the faults joined below that wrapper were reported as one).
func TestJSONErrorListsEveryFault(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	doc := strings.Replace(string(controlsDecl(1, "busybox:1")), `{"name": "db", "image": "busybox:1"}`, `{"name": "db", "image": ""}`, 1)
	doc = strings.Replace(doc, `{"name": "web", "image": "busybox:1"}`, `{"name": "web", "image": "busybox:1", "stop_timeout": "6o s"}`, 1)
	if err := os.WriteFile(bad, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, nil, "plan", "--state", t.TempDir(), "--declaration", bad, "--output", "json")
	if code != 1 {
		t.Fatalf("plan of a faulty declaration = exit %d, want 1\n%s%s", code, out, errOut)
	}
	var got struct {
		Error  string
		Faults []spec.FieldError
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	want := []spec.FieldError{ // reading faults first, then validation's
		{Path: "containers[1].stop_timeout", Reason: `"6o s" is not a duration (write e.g. "30s" or "2m")`},
		{Path: "containers[0].image", Reason: `"" is not an image reference`},
	}
	if diff := cmp.Diff(want, got.Faults); diff != "" || !strings.HasPrefix(got.Error, bad+": ") {
		t.Errorf("plan --output json error %q; faults (-want +got):\n%s", got.Error, diff)
	}
}

// TestManAndCompletion: make man writes a page per command, from the
// commands (their flags included), the daemons' in section 8; completion scripts come for bash, zsh
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
		file := "meshhost-" + name + ".1"
		if daemonPages["meshhost-"+name] {
			file = "meshhost-" + name + ".8"
		}
		page, err := os.ReadFile(filepath.Join(dir, file))
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
