package digest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshhost/meshhost/spec"
)

// TestKeyedGolden pins the v2 (keyed) digests of the golden cases under the
// fixed test key, as TestGolden pins v1: a change replaces every container
// labelled v2.
func TestKeyedGolden(t *testing.T) {
	path := filepath.Join("testdata", "golden-v2.json")
	got := map[string]string{}
	for name, r := range goldenCases(t) {
		got[name] = testKey.Of(r)
	}
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./digest -update once to create it)", err)
	}
	var want map[string]string
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("v2 digests changed (-golden +now):\n%s\nA changed digest replaces every running container labelled with it: add a new digest version instead.", diff)
	}
}

// TestKeyedDigestResistsAGuess: a container's labels are public (podman's
// event log), and they show every field but env and label values. With a v1
// digest, hashing the record's fields plus a guessed value and comparing
// with the digest label tests the guess offline; with the v2 digest the same
// computation, right guess included, matches nothing.
func TestKeyedDigestResistsAGuess(t *testing.T) {
	const secret = "hunter2" // low entropy: in any list of guesses
	c := typical()
	c.Env = map[string]string{"DB_PASSWORD": secret}
	r := mustRender(t, c, nil, resolveMode)
	label := testKey.Of(r)
	if !strings.HasPrefix(label, "v2:hmac-sha256:"+testKey.id+":") || len(label) != len("v2:hmac-sha256:"+testKey.id+":")+64 {
		t.Fatalf("Key.Of = %q, want v2:hmac-sha256:<key id>:<64 hex>", label)
	}
	if strings.Contains(label, Of(r)[len("v1:sha256:"):]) {
		t.Fatalf("the keyed digest %q contains the unkeyed one", label)
	}

	// The attacker's side: the record without the secret, plus guesses.
	back, err := ParseRecord(testKey.Record(r))
	if err != nil {
		t.Fatal(err)
	}
	for _, guess := range []string{"password", "123456", secret, "letmein"} {
		g := back
		g.Env = map[string]string{"DB_PASSWORD": guess}
		g.Labels = r.Labels // at worst known too: only the secret is guessed
		g.Mode, g.DNS = r.Mode, r.DNS
		unkeyed := Of(g)
		if guess == secret && unkeyed != Of(r) {
			t.Fatal("test is broken: the right guess does not rebuild the v1 digest")
		}
		for _, hash := range []string{unkeyed, unkeyed[len("v1:sha256:"):]} {
			if strings.Contains(label, hash) {
				t.Errorf("guess %q: the unkeyed digest %s is in the label %s", guess, hash, label)
			}
		}
		if ok, err := Matches(label, g); ok || err == nil {
			t.Errorf("Matches(v2 label, guess %q) without the key = %v, %v; want an error", guess, ok, err)
		}
	}
}

// TestKeyMatchesEveryVersion: Key.Matches judges a v1 label unkeyed and a v2
// label with its key; a v2 label of another key is not judged (ErrOtherKey),
// nor a malformed one.
func TestKeyMatchesEveryVersion(t *testing.T) {
	r := mustRender(t, typical(), testRoster(5), spec.Mode{Names: spec.Copy})
	changed := r
	changed.Image = "other"
	other, err := NewKey([]byte("another machine's key, 32 bytes!"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, label string
		same, diff  bool
		err         error
	}{
		{"v1", Of(r), true, false, nil},
		{"v2", testKey.Of(r), true, false, nil},
		{"v2, other key", other.Of(r), false, false, ErrOtherKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := testKey.Judges(tc.label); !errors.Is(err, tc.err) {
				t.Errorf("Judges = %v, want %v", err, tc.err)
			}
			if ok, err := testKey.Matches(tc.label, r); ok != tc.same || !errors.Is(err, tc.err) {
				t.Errorf("Matches(same) = %v, %v; want %v, %v", ok, err, tc.same, tc.err)
			}
			if ok, err := testKey.Matches(tc.label, changed); ok != tc.diff || !errors.Is(err, tc.err) {
				t.Errorf("Matches(changed) = %v, %v; want %v, %v", ok, err, tc.diff, tc.err)
			}
		})
	}
	if testKey.Of(r) == other.Of(r) {
		t.Error("two keys make the same digest")
	}
	for _, bad := range []string{"v2:sha256:" + strings.Repeat("0", 64), "v2:hmac-sha256:" + testKey.id, "v2:hmac-sha256:" + testKey.id + ":00"} {
		if ok, err := testKey.Matches(bad, r); ok || err == nil {
			t.Errorf("Matches(%q) = %v, %v; want an error", bad, ok, err)
		}
	}
	if _, err := testKey.Matches("v9:sha256:00", r); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("Matches(v9) = %v, want ErrUnsupportedVersion", err)
	}
	// The v2 record reads back, and explains as the v1 record did.
	rec := testKey.Record(r)
	if !strings.HasPrefix(rec, "v2:") {
		t.Errorf("Record = %.20q..., want a v2 record", rec)
	}
	if cs, err := testKey.ExplainRecord(rec, changed); err != nil || len(cs) != 1 || cs[0].Field != "image" {
		t.Errorf("ExplainRecord(v2 record, changed image) = %v, %v", cs, err)
	}
	if cs, err := testKey.ExplainRecord(recordV1(testKey, r), changed); err != nil || len(cs) != 1 || cs[0].Field != "image" {
		t.Errorf("ExplainRecord(keyed v1 record, changed image) = %v, %v", cs, err)
	}
}
