package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	changes := testKey.Explain(mustRender(t, a, nil, resolveMode), mustRender(t, b, nil, resolveMode))

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
	wantEnv := fmt.Sprintf("env: -GONE (%s) ~DB_PASSWORD (%s→%s)", testKey.ValueHash(gone), testKey.ValueHash(oldSecret), testKey.ValueHash(newSecret))
	wantLabels := fmt.Sprintf("labels: +api_token (%s)", testKey.ValueHash(labelSecret))
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

// TestRecordKeepsNoValues: the record label holds no env or label value,
// only keyed hashes; the same value hashes differently under two keys (two
// machines); ExplainRecord names a change from the hashes, as Explain does
// from the values; a record hashed with another key says so instead of
// naming every value changed.
func TestRecordKeepsNoValues(t *testing.T) {
	const envSecret, labelSecret = "s3cr3t-hunter2", "tok-9f2c77e1"
	c := typical()
	c.Env = map[string]string{"DB_PASSWORD": envSecret, "EMPTY": ""}
	c.Labels = map[string]string{"api_token": labelSecret}
	r := mustRender(t, c, nil, resolveMode)
	record := testKey.Record(r)
	for _, v := range []string{envSecret, labelSecret} {
		if strings.Contains(record, v) {
			t.Errorf("record label carries the value %q: %s", v, record)
		}
	}
	if !strings.Contains(record, `"DB_PASSWORD":"`+testKey.sum(envSecret)+`"`) {
		t.Errorf("record %s does not hold DB_PASSWORD's keyed hash", record)
	}
	if Of(r) != Of(mustRender(t, c, nil, resolveMode)) || !strings.HasPrefix(Of(r), "v1:sha256:") {
		t.Error("the digest moved") // the golden test pins it; this says why it matters here
	}

	other, err := NewKey([]byte("another machine's key, 32 bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	if other.ValueHash(envSecret) == testKey.ValueHash(envSecret) && other.sum(envSecret) == testKey.sum(envSecret) {
		t.Error("two keys hash a value the same")
	}
	if other.Record(r) == record {
		t.Error("two keys make the same record")
	}
	unkeyed := sha256.Sum256([]byte(envSecret))
	if testKey.ValueHash(envSecret) == hex.EncodeToString(unkeyed[:])[:HashLen] {
		t.Error("ValueHash is the unkeyed SHA-256 prefix")
	}

	c2 := c
	c2.Env = map[string]string{"DB_PASSWORD": "n3w-s3cret", "EMPTY": "", "ADDED": "x"}
	r2 := mustRender(t, c2, nil, resolveMode)
	fromRecord, err := testKey.ExplainRecord(record, r2)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("env: +ADDED (%s) ~DB_PASSWORD (%s→%s)", testKey.ValueHash("x"), testKey.ValueHash(envSecret), testKey.ValueHash("n3w-s3cret"))
	if len(fromRecord) != 1 || fromRecord[0].String() != want {
		t.Errorf("ExplainRecord = %v, want [%s]", fromRecord, want)
	}
	if fromValues := testKey.Explain(r, r2); len(fromValues) != 1 || fromValues[0].String() != want {
		t.Errorf("Explain = %v, want [%s]", fromValues, want)
	}
	wantValues := fmt.Sprintf("env: +ADDED=x ~DB_PASSWORD=(%s)→n3w-s3cret", testKey.ValueHash(envSecret))
	if got := fromRecord[0].WithValues().String(); got != wantValues {
		t.Errorf("ExplainRecord, WithValues = %q, want %q (the old value is not recorded)", got, wantValues)
	}

	// Hashed with another key: env's keys compare, its values cannot.
	c3 := c2
	c3.Image = "other:2"
	changes, err := other.ExplainRecord(record, mustRender(t, c3, nil, resolveMode))
	if !errors.Is(err, ErrOtherKey) {
		t.Errorf("ExplainRecord with another key: err = %v, want ErrOtherKey", err)
	}
	var got []string
	for _, ch := range changes {
		got = append(got, ch.String())
	}
	if want := "image: docker.io/gitea/gitea:1.22 -> other:2; env: +ADDED (" + other.ValueHash("x") + ")"; strings.Join(got, "; ") != want {
		t.Errorf("ExplainRecord with another key = %q, want %q", strings.Join(got, "; "), want)
	}
}

func TestNewKeyRefusesAShortSecret(t *testing.T) {
	if _, err := NewKey(make([]byte, KeySize-1)); err == nil {
		t.Errorf("NewKey(%d bytes) = nil error", KeySize-1)
	}
}
