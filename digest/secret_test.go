package digest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestChangeHidesSecretValues: a change to an env or label value shows the
// key and short hashes of the old and new values, wherever a Change is
// printed (String, %v, %+v, JSON); only WithValues shows the values.
func TestChangeHidesSecretValues(t *testing.T) {
	const oldSecret, newSecret, labelSecret, gone = "hunter2-old-8c1f", "s3cret-new-44ab", "token-label-71e0", "removed-value-9d2c"
	a := typical()
	a.Env = map[string]string{"DB_PASSWORD": oldSecret, "GONE": gone}
	a.Labels = map[string]string{"team": "core"}
	b := typical()
	b.Env = map[string]string{"DB_PASSWORD": newSecret}
	b.Labels = map[string]string{"team": "core", "api_token": labelSecret}
	changes := Explain(mustRender(t, a, nil, resolveMode), mustRender(t, b, nil, resolveMode))

	var shown []string
	for _, c := range changes {
		js, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		shown = append(shown, c.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v", c, c), string(js))
	}
	all := strings.Join(shown, "\n")
	for _, v := range []string{oldSecret, newSecret, labelSecret, gone} {
		if strings.Contains(all, v) {
			t.Errorf("a value %q appears in how a Change is shown:\n%s", v, all)
		}
	}
	wantEnv := fmt.Sprintf("env: -GONE (%s) ~DB_PASSWORD (%s→%s)", ValueHash(gone), ValueHash(oldSecret), ValueHash(newSecret))
	wantLabels := fmt.Sprintf("labels: +api_token (%s)", ValueHash(labelSecret))
	var got []string
	for _, c := range changes {
		got = append(got, c.String())
	}
	if g := strings.Join(got, "; "); g != wantEnv+"; "+wantLabels {
		t.Errorf("changes = %q, want %q", g, wantEnv+"; "+wantLabels)
	}

	var values []string
	for _, c := range changes {
		values = append(values, c.WithValues().String())
	}
	want := "env: -GONE=" + gone + " ~DB_PASSWORD=" + oldSecret + "→" + newSecret + "; labels: +api_token=" + labelSecret
	if g := strings.Join(values, "; "); g != want {
		t.Errorf("WithValues = %q, want %q", g, want)
	}
	for _, f := range spec.Fields {
		if spec.SecretValues(f.Name) != (f.Name == "env" || f.Name == "labels") {
			t.Errorf("SecretValues(%q) = %v", f.Name, spec.SecretValues(f.Name))
		}
	}
}
