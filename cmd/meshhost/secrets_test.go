package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/agent/statedir"
)

// Distinctive values, to be found nowhere but the journal on disk and
// --show-values: a value changed, added and removed, in env and labels.
const (
	secretEnvOld     = "Sekr1t-Env-Old-7f3e9a"
	secretEnvNew     = "Sekr1t-Env-New-2c81db"
	secretEnvGone    = "Sekr1t-Env-Gone-4d2a11"
	secretEnvAdded   = "Sekr1t-Env-Added-e83c0f"
	secretLabelOld   = "Lbl-Tok-Old-55e0c4"
	secretLabelNew   = "Lbl-Tok-New-91aa07"
	secretLabelGone  = "Lbl-Tok-Gone-3b9f62"
	secretLabelAdded = "Lbl-Tok-Added-c70d18"
	secretRefused    = "Sekr1t-Refused-0b6d3f"
)

var allSecrets = []string{secretEnvOld, secretEnvNew, secretEnvGone, secretEnvAdded,
	secretLabelOld, secretLabelNew, secretLabelGone, secretLabelAdded, secretRefused}

// secretsDecl is declaration gen: db with env and labels, and web. first
// is generation 1's values, else generation 2's.
func secretsDecl(gen int, first bool, refused string) []byte {
	env := fmt.Sprintf(`{"DB_PASSWORD": %q, "GONE": %q, "LOG": "info"}`, secretEnvOld, secretEnvGone)
	labels := fmt.Sprintf(`{"api_token": %q, "gone": %q}`, secretLabelOld, secretLabelGone)
	if !first {
		env = fmt.Sprintf(`{"DB_PASSWORD": %q, "ADDED": %q, "LOG": "info"}`, secretEnvNew, secretEnvAdded)
		labels = fmt.Sprintf(`{"api_token": %q, "added": %q}`, secretLabelNew, secretLabelAdded)
	}
	if refused != "" {
		env = fmt.Sprintf(`{"DB_PASSWORD": %q}`, refused)
	}
	return []byte(fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "off",
	  "roster": {"generation": %d, "zones": ["internal"], "names": {"a.internal": ["10.9.0.1"]}},
	  "containers": [{"name": "db", "image": "busybox", "env": %s, "labels": %s},
	                 {"name": "web", "image": "busybox"}]}`, gen, gen, env, labels))
}

// TestSecretsStayOut sets distinctive env and label values, changes them
// (a replacement), gets a declaration refused that carries another, and
// greps every output for them: the agent's log (every component, debug
// level), plan and explain (text and JSON), history (text and JSON),
// status, roster diff, the metrics and /v1/report, and the refusals. A
// change shows the key and short hashes; only --show-values and the
// journal on disk (the owner's alone) hold the values.
func TestSecretsStayOut(t *testing.T) {
	f := newControlsFixture(t)
	f.offer(secretsDecl(1, true, ""))
	f.pass()
	next := secretsDecl(2, false, "")
	file := filepath.Join(t.TempDir(), "next.json")
	if err := os.WriteFile(file, next, 0o600); err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{}
	cli := func(name string, args ...string) string {
		t.Helper()
		code, out, errOut := f.cli(args...)
		if code != 0 && code != 2 {
			t.Errorf("meshhost %v = exit %d: %s", args, code, errOut)
		}
		outputs[name] = out + errOut
		return out
	}
	plan := cli("plan", "plan", "--declaration", file)
	cli("plan json", "plan", "--declaration", file, "--output", "json")
	cli("explain", "explain", "db", "--declaration", file)
	cli("explain json", "explain", "db", "--declaration", file, "--output", "json")
	key, err := statedir.New(f.state).LoadHashKey()
	if err != nil {
		t.Fatal(err)
	}
	wantChange := fmt.Sprintf("env: +ADDED (%s) -GONE (%s) ~DB_PASSWORD (%s→%s)", key.ValueHash(secretEnvAdded), key.ValueHash(secretEnvGone), key.ValueHash(secretEnvOld), key.ValueHash(secretEnvNew))
	if !strings.Contains(plan, wantChange) {
		t.Errorf("plan does not show %q:\n%s", wantChange, plan)
	}

	// The positive control: --show-values shows the values it knows, so
	// the grep below would find a leak. (The old values it cannot show:
	// the container's record holds only their keyed hashes.)
	_, shown, _ := f.cli("plan", "--declaration", file, "--show-values")
	_, shownExplain, _ := f.cli("explain", "db", "--declaration", file, "--show-values", "--output", "json")
	for _, v := range []string{secretEnvNew, secretEnvAdded, secretLabelNew, secretLabelAdded} {
		if !strings.Contains(shown, v) || !strings.Contains(shownExplain, v) {
			t.Errorf("--show-values does not show %q:\n%s\n%s", v, shown, shownExplain)
		}
	}

	f.offer(next)
	if rep := f.pass(); rep.Result == nil || rep.Result.Count("replace") != 1 {
		t.Fatalf("declaration 2 did not replace db: %+v", rep)
	}
	// Refused: declaration 2 again with another value (a conflict), and a
	// faulty declaration carrying one, pushed and read from a file.
	if err := pushTo(context.Background(), "unix:"+f.push, "", secretsDecl(2, false, secretRefused)); err != nil {
		outputs["push refused (conflict)"] = err.Error()
	} else {
		t.Error("a conflicting declaration was accepted")
	}
	faulty := strings.Replace(string(secretsDecl(3, false, secretRefused)), `"image": "busybox", "env"`, `"image": "", "env"`, 1)
	if err := pushTo(context.Background(), "unix:"+f.push, "", []byte(faulty)); err != nil {
		outputs["push refused (faulty)"] = err.Error()
	} else {
		t.Error("a faulty declaration was accepted")
	}

	cli("history", "history")
	cli("history json", "history", "--output", "json")
	cli("status", "status")
	cli("status json", "status", "--output", "json")
	cli("roster diff", "roster", "diff", "1", "2")
	for name, h := range map[string]http.Handler{
		"/metrics":   promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{}),
		"/v1/report": f.agent.Handler(),
	} {
		srv := httptest.NewServer(h)
		path := name
		if name == "/metrics" {
			path = "/"
		}
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		outputs[name] = string(body)
	}
	outputs["agent log"] = f.logs.String()
	// Every container's labels (podman copies them into its event log):
	// no env value, and a label value only as the label declared with it.
	observed, err := f.rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range observed {
		if o.Name == "db" && !strings.Contains(o.Labels[digest.LabelRecord], "DB_PASSWORD") {
			t.Errorf("db's record label %q is not what this test means to grep", o.Labels[digest.LabelRecord])
		}
		for k, v := range o.Labels {
			if declared := k == "api_token" || k == "added" || k == "gone"; !declared {
				outputs["label "+k+" of "+o.Name] = v
			}
		}
	}
	if !strings.Contains(outputs["agent log"], "DB_PASSWORD") || !strings.Contains(outputs["/v1/report"], "generation") {
		t.Fatalf("the log or the report is not what this test means to grep:\n%s\n%s", outputs["agent log"], outputs["/v1/report"])
	}
	for name, out := range outputs {
		for _, v := range allSecrets {
			if strings.Contains(out, v) {
				t.Errorf("%s shows the value %q:\n%s", name, v, out)
			}
		}
	}

	// The journal on disk keeps the whole declaration, the owner's alone.
	journalDir := statedir.New(f.state).Journal()
	found := false
	err = filepath.WalkDir(journalDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if want := fs.FileMode(0o600); d.IsDir() {
			if fi.Mode().Perm() != 0o700 {
				t.Errorf("%s has mode %v, want 0700", path, fi.Mode().Perm())
			}
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		} else if data, _ := os.ReadFile(path); strings.Contains(string(data), secretEnvNew) {
			found = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Error("the journal on disk does not keep the declaration's values")
	}
}
