package reconcile_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// secretSetters sets, for each field whose values may hold secrets
// (spec.SecretValues), an entry of container c to value.
var secretSetters = map[string]func(c *spec.Container, key, value string){
	"env": func(c *spec.Container, key, value string) {
		if c.Env == nil {
			c.Env = map[string]string{}
		}
		c.Env[key] = value
	},
	"labels": func(c *spec.Container, key, value string) {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[key] = value
	},
}

// TestSecretValuesReachNoLabelLogOrChange is the class test of the
// secret-bearing fields: for every field spec.SecretValues names, a
// distinctive value is created, changed, added and removed (replacements),
// and a replacement fails; the values appear in no container label (but the
// declared label itself), no log line (debug level), no Reason, Change,
// Action or Outcome however printed, and no error. The declaration holds a
// distinctive value in every field that can carry one.
func TestSecretValuesReachNoLabelLogOrChange(t *testing.T) {
	ctx := context.Background()
	var secretFields []string
	for _, f := range spec.Fields {
		if spec.SecretValues(f.Name) {
			secretFields = append(secretFields, f.Name)
			if secretSetters[f.Name] == nil {
				t.Fatalf("spec.SecretValues(%q) holds, and this test cannot set it: add it to secretSetters", f.Name)
			}
		}
	}
	var values []string
	value := func(field, what string) string {
		v := fmt.Sprintf("Sekr1t-%s-%s-%08x", field, what, len(values)*0x9e3779b1)
		values = append(values, v)
		return v
	}
	gen1 := container("db", "postgres:16")
	gen2 := container("db", "postgres:16") // the values change: a replacement
	gen3 := container("db", "postgres:17") // the image changes, values too: a failing replacement
	for _, f := range secretFields {
		set := secretSetters[f]
		kept := value(f, "kept")
		set(&gen1, "KEPT", kept)
		set(&gen1, "CHANGED", value(f, "old"))
		set(&gen1, "GONE", value(f, "gone"))
		set(&gen2, "KEPT", kept)
		set(&gen2, "CHANGED", value(f, "new"))
		set(&gen2, "ADDED", value(f, "added"))
		set(&gen3, "KEPT", kept)
		set(&gen3, "CHANGED", value(f, "newer"))
	}

	var logs bytes.Buffer
	rt := memory.New(memory.Options{})
	r := newReconciler(t, rt, func(c *reconcile.Config) {
		c.Owner = "ace"
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	var shown []string
	show := func(what string, v any) {
		js, _ := json.Marshal(v)
		shown = append(shown, fmt.Sprintf("%s: %v\n%+v\n%s", what, v, v, js))
	}
	var withValues []string
	for i, c := range []spec.Container{gen1, gen2, gen3} {
		desired := []spec.Rendered{render(t, c, nil, resolveMode)}
		p, err := r.Plan(ctx, desired)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range p.Actions {
			show(fmt.Sprintf("pass %d action", i+1), a.String())
			show(fmt.Sprintf("pass %d reason", i+1), a.Reason)
			for _, ch := range a.Changes {
				show(fmt.Sprintf("pass %d change", i+1), ch)
				show(fmt.Sprintf("pass %d change string", i+1), ch.String())
				withValues = append(withValues, ch.WithValues().String())
			}
		}
		if i == 2 {
			rt.Inject(memory.Fault{Method: "Start", N: 1})
		}
		res, err := r.Reconcile(ctx, desired)
		if err != nil {
			show(fmt.Sprintf("pass %d error", i+1), err.Error())
		}
		if (err != nil) != (i == 2) || res == nil {
			t.Fatalf("pass %d: Reconcile = %v, %v; want an error in the third pass alone", i+1, res, err)
		}
		for _, o := range res.Outcomes {
			show(fmt.Sprintf("pass %d outcome", i+1), struct {
				Kind, Name, Reason string
				Changes            []digest.Change
				Err                string
			}{string(o.Kind), o.Name, o.Reason, o.Changes, fmt.Sprint(o.Err)})
		}
		for _, ct := range rt.Containers() {
			for k, v := range ct.Labels {
				if !strings.HasPrefix(k, spec.LabelPrefix) && ct.Settings.Labels[k] == v {
					continue // a declared label: the container carries it by definition
				}
				show(fmt.Sprintf("pass %d: label %s of %s", i+1, k, ct.Name), v)
			}
		}
	}
	all := strings.Join(shown, "\n") + "\n" + logs.String()
	// The controls: the passes did what this test greps, and the values
	// were there to find.
	if !strings.Contains(all, "~CHANGED (") || !strings.Contains(logs.String(), "CHANGED") || !strings.Contains(all, "io.meshhost.record") {
		t.Fatalf("the passes did not replace db for its values, or the log or the labels are not what this test greps:\n%s", all)
	}
	if wv := strings.Join(withValues, "\n"); !strings.Contains(wv, values[len(values)-1]) {
		t.Errorf("WithValues does not show the newest value %q, so the grep below proves nothing:\n%s", values[len(values)-1], wv)
	}
	for _, v := range values {
		if strings.Contains(all, v) {
			t.Errorf("the value %q appears in a label, a log line, a reason or a change:\n%s", v, all)
		}
	}
}

// TestNoLabelConfirmsAGuessedSecret is the class test of guessing: a
// container's labels reach podman's event log (the journal), and show every
// field but the secret values. For every field spec.SecretValues names, a
// container holds a low-entropy secret; whoever knows the rest of its
// declaration and guesses the secret rightly must still not be able to
// reproduce any of meshhost's labels, nor any hash in the log, the plan or
// the outcomes, by an unkeyed hash: not the v1 digest (digest.Of) of the
// declaration with the guess, nor the SHA-256 of the guess.
func TestNoLabelConfirmsAGuessedSecret(t *testing.T) {
	const secret = "hunter2"
	guesses := []string{"123456", "password", secret, "letmein"}
	for _, f := range spec.Fields {
		if !spec.SecretValues(f.Name) {
			continue
		}
		set := secretSetters[f.Name]
		if set == nil {
			t.Fatalf("spec.SecretValues(%q) holds, and this test cannot set it: add it to secretSetters", f.Name)
		}
		t.Run(f.Name, func(t *testing.T) {
			withSecret := func(v string) spec.Rendered {
				c := container("db", "postgres:16")
				set(&c, "DB_PASSWORD", v)
				set(&c, "LOG", "info")
				return render(t, c, nil, resolveMode)
			}
			var logs bytes.Buffer
			rt := memory.New(memory.Options{})
			r := newReconciler(t, rt, func(c *reconcile.Config) {
				c.Owner = "ace"
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			})
			// Created, then replaced for another value: both labels and
			// the change's hashes are out there.
			var shown []string
			for _, v := range []string{"first-" + secret, secret} {
				res := mustReconcile(t, r, []spec.Rendered{withSecret(v)})
				for _, o := range res.Outcomes {
					js, _ := json.Marshal(o.Changes)
					shown = append(shown, o.Reason, string(js))
				}
			}
			ct, ok := rt.Container("db")
			if !ok {
				t.Fatal("db was not created")
			}
			var labels []string
			for k, v := range ct.Labels {
				if strings.HasPrefix(k, spec.LabelPrefix) {
					labels = append(labels, k+"="+v)
				}
			}
			public := strings.Join(labels, "\n") + "\n" + strings.Join(shown, "\n") + "\n" + logs.String()
			if !strings.Contains(public, digest.LabelDigest+"=") || !strings.Contains(public, "DB_PASSWORD") {
				t.Fatalf("the labels, log or outcomes are not what this test greps:\n%s", public)
			}
			for _, g := range guesses {
				v1 := digest.Of(withSecret(g))
				if g == secret && v1 != digest.Of(ct.Settings) {
					t.Fatal("test is broken: the right guess does not rebuild the container's v1 digest")
				}
				sum := sha256.Sum256([]byte(g))
				for what, h := range map[string]string{
					"the v1 digest": strings.TrimPrefix(v1, "v1:sha256:"),
					"the SHA-256":   hex.EncodeToString(sum[:]),
				} {
					if strings.Contains(public, h) {
						t.Errorf("%s of the declaration with the guess %q is in a label, the log or an outcome:\n%s", what, g, public)
					}
				}
			}
		})
	}
}
