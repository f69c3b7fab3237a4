package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGoldenJSON")

// goldenNormalize makes a command's JSON comparable across runs: times,
// durations, container IDs, versions and the test's paths, each replaced
// by a placeholder of its kind; keys and everything else are kept, so a
// renamed key or a changed value fails the comparison.
func goldenNormalize(t *testing.T, out, state string) string {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	timeRE := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`)
	idRE := regexp.MustCompile(`^[0-9a-f]{64}$`)
	var walk func(key string, v any) any
	walk = func(key string, v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(k, e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(key, e)
			}
		case json.Number:
			if strings.HasSuffix(key, "_seconds") {
				return "<seconds>"
			}
		case string:
			switch {
			case timeRE.MatchString(x):
				return "<time>"
			case idRE.MatchString(x):
				return "<id>"
			case key == "go" || key == "commit" || key == "version" && strings.Contains(x, "devel") || key == "version" && strings.HasPrefix(x, "v"):
				return "<" + key + ">"
			}
			return strings.ReplaceAll(x, state, "<state>")
		}
		return v
	}
	v = walk("", v)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGoldenJSON runs every command whose JSON an in-memory agent can
// produce (migrate pause and resume, and config check, included), and compares what it prints with testdata/golden/NAME.json
// (go test -run TestGoldenJSON -update rewrites them). Keys are snake_case,
// durations float seconds named *_seconds, times RFC 3339. probe and
// dns-check need podman, publish a NATS server: their JSON is covered by
// their own tests.
func TestGoldenJSON(t *testing.T) {
	f := newControlsFixture(t)
	f.offer(controlsDecl(1, "busybox:1"))
	f.pass()
	next := controlsDecl(2, "busybox:2")
	file := filepath.Join(t.TempDir(), "next.json")
	if err := os.WriteFile(file, next, 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(f.state, "agent.toml") // in the state directory: its path normalized
	if err := os.WriteFile(config, []byte("runtime = \"memory\"\nbudget = 9\nhold-above = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		args []string
		code int
		then func()
		// bare: run without the fixture's --state.
		bare bool
	}{
		{name: "plan", args: []string{"plan", "--declaration", file}, code: exitChanges},
		{name: "explain", args: []string{"explain", "web", "--declaration", file}},
		{name: "status-before", args: []string{"status"}, then: func() { f.offer(next); f.pass() }},
		{name: "status-held", args: []string{"status"}},
		{name: "approve", args: []string{"approve", "2"}, then: func() { f.pass() }},
		{name: "freeze", args: []string{"freeze", "--reason", "golden"}},
		{name: "unfreeze", args: []string{"unfreeze"}},
		{name: "history", args: []string{"history"}},
		{name: "roster-diff", args: []string{"roster", "diff", "1", "2"}},
		{name: "roster-accept", args: []string{"roster", "accept", "3"}, code: exitError}, // nothing is held: refused (issue 22 defect 12)
		{name: "rollback", args: []string{"rollback", "1", "--push", "unix:" + f.push}},
		{name: "migrate-status", args: []string{"migrate", "status"}, code: exitError},
		{name: "migrate-pause", args: []string{"migrate", "pause"}},
		{name: "migrate-resume", args: []string{"migrate", "resume"}},
		{name: "config-check", args: []string{"config", "check", "--config", config, "--machine", "golden"}}, // the default machine is the host name
		{name: "version", args: []string{"version"}, bare: true},
		{name: "demo", args: []string{"demo"}, bare: true},
		{name: "error", args: []string{"approve", "9", "--state", filepath.Join(f.state, "typo")}, code: exitError, bare: true},
		{name: "usage-error", args: []string{"plan", "--no-such-flag"}, code: exitUsage, bare: true},
	}
	for _, st := range steps {
		run := f.cli
		if st.bare {
			run = func(args ...string) (int, string, string) { return runCLI(t, nil, args...) }
		}
		code, out, errOut := run(append(st.args, "--output", "json")...)
		if code != st.code {
			t.Errorf("meshhost %v --output json = exit %d, want %d\n%s%s", st.args, code, st.code, out, errOut)
		}
		got := goldenNormalize(t, out, f.state)
		path := filepath.Join("testdata", "golden", st.name+".json")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if want, err := os.ReadFile(path); err != nil {
			t.Errorf("%s: %v (run go test -run TestGoldenJSON -update)", st.name, err)
		} else if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("meshhost %v --output json (-want +got):\n%s", st.args, diff)
		}
		if bytes.Contains([]byte(got), []byte(`"Time"`)) || regexp.MustCompile(`"[a-z]+[A-Z]\w*":`).MatchString(got) {
			t.Errorf("%s: a key is not snake_case:\n%s", st.name, got)
		}
		if st.then != nil {
			st.then()
		}
	}
}

// jsonShape lists the key paths of a JSON document, sorted and each once
// (an array's elements as []), for the commands whose values depend on the
// machine (probe, dns-check): their golden file is their shape.
func jsonShape(t *testing.T, out string) string {
	t.Helper()
	fieldRE := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	paths := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if !fieldRE.MatchString(k) {
					k = "{key}" // a map's key (a network's name), not a field
				}
				paths[prefix+"."+k] = true
				walk(prefix+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(prefix+"[]", e)
			}
		}
	}
	walk("", v)
	keys := make([]string, 0, len(paths))
	for k := range paths {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, "\n") + "\n"
}

// checkGolden compares got with testdata/golden/name, or writes it there
// with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}
