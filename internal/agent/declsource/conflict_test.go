package declsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/meshhost/meshhost/internal/admit"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/spec"
)

// genDoc is a declaration of generation gen whose roster is rosterGen with
// names, and whose one container has image and the env value secret.
func genDoc(gen, rosterGen int, names map[string]string, image, secret string) string {
	return decltest.Declaration(uint64(gen)).RosterGen(uint64(rosterGen)).NameMap(names).App("app", image, "DB_PASSWORD", secret).String()
}

var (
	namesA = map[string]string{"a.internal": "10.0.0.1", "b.internal": "10.0.0.2"}
	namesB = map[string]string{"a.internal": "10.0.0.9", "c.internal": "10.0.0.3"}
)

func refusedCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "meshhost_agent_declarations_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestGenerationsCannotLie: a generation names one declaration and one
// roster. The same push again is accepted and changes nothing; the
// generation in force with other content, an older generation, a roster
// older than the one served, or the served roster's generation with other
// names is refused as a conflict (409) naming the generation and what
// differs, never an env value; the refusals are counted by reason, every
// reason present from the start.
func TestGenerationsCannotLie(t *testing.T) {
	const secret, otherSecret = "pw-4f1c-original", "pw-9e0d-changed"
	reg := prometheus.NewRegistry()
	s := New(Config{Machine: "ace", Registerer: reg})
	for _, r := range admit.Reasons {
		if _, ok := refusedCounts(t, reg)[string(r)]; !ok {
			t.Errorf("no meshhost_agent_declarations_refused_total{reason=%q} before any refusal", r)
		}
	}
	first := genDoc(7, 3, namesA, "busybox:1", secret)
	if _, err := s.Offer([]byte(first), "test"); err != nil {
		t.Fatal(err)
	}
	served := decltest.NewRoster(3).NameMap(namesA).Value()
	s.SetServed(served.Generation, func() *spec.Roster { return served })

	tests := []struct {
		name    string
		doc     string
		refusal Refusal // "" accepted
		want    []string
	}{
		{name: "the same push again", doc: first},
		{name: "the same declaration, written otherwise", doc: strings.ReplaceAll(first, "\n", " ")},
		{name: "generation in force, another image", doc: genDoc(7, 3, namesA, "busybox:2", secret), refusal: RefusedGenerationReused,
			want: []string{"generation: 7 is in force with other content; a changed declaration needs a newer generation",
				"containers[0].image: differs from generation 7 in force"}},
		{name: "generation in force, another env value", doc: genDoc(7, 3, namesA, "busybox:1", otherSecret), refusal: RefusedGenerationReused,
			want: []string{"containers[0].env: differs from generation 7 in force"}},
		{name: "generation in force, another roster", doc: genDoc(7, 4, namesB, "busybox:1", secret), refusal: RefusedGenerationReused,
			want: []string{"roster.generation: 4 here, 3 in generation 7 in force"}},
		{name: "older generation", doc: genDoc(6, 3, namesA, "busybox:1", secret), refusal: RefusedOlder,
			want: []string{"generation: 6 is older than generation 7, which is in force"}},
		{name: "roster older than served", doc: genDoc(8, 2, namesA, "busybox:1", secret), refusal: RefusedRosterOlder,
			want: []string{"roster.generation: 2 is older than roster generation 3, served"}},
		{name: "served roster generation, other names", doc: genDoc(8, 3, namesB, "busybox:1", secret), refusal: RefusedRosterGenerationReused,
			want: []string{"roster.generation: roster generation 3 is served with other names; a changed roster needs a newer generation",
				`roster.names["a.internal"]: 10.0.0.9 here, 10.0.0.1 in force`,
				`roster.names["b.internal"]: in the roster in force (10.0.0.2), not here`,
				`roster.names["c.internal"]: not in the roster in force`}},
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := refusedCounts(t, reg)
			code, body := put(t, srv.URL, tt.doc)
			if tt.refusal == "" {
				if code != http.StatusOK {
					t.Fatalf("PUT = %d %s, want 200", code, body)
				}
			} else {
				if code != http.StatusConflict {
					t.Fatalf("PUT = %d %s, want 409", code, body)
				}
				for _, w := range tt.want {
					if !strings.Contains(body, w) {
						t.Errorf("the refusal does not say %q:\n%s", w, body)
					}
				}
				if after := refusedCounts(t, reg); after[string(tt.refusal)] != before[string(tt.refusal)]+1 {
					t.Errorf("refusals{reason=%q} went %v -> %v, want +1", tt.refusal, before[string(tt.refusal)], after[string(tt.refusal)])
				}
			}
			for _, v := range []string{secret, otherSecret} {
				if strings.Contains(body, v) {
					t.Errorf("the answer shows an env value: %s", body)
				}
			}
			if d, _ := s.Current(); d.Generation != 7 || d.Containers[0].Image != "busybox:1" {
				t.Errorf("in force: generation %d image %s, want 7 busybox:1 still", d.Generation, d.Containers[0].Image)
			}
		})
	}

	// A newer declaration with a newer roster goes in; errors.Is works on
	// what Offer returns.
	if _, err := s.Offer([]byte(genDoc(8, 4, namesB, "busybox:1", secret)), "test"); err != nil {
		t.Fatalf("a newer declaration: %v", err)
	}
	_, err := s.Offer([]byte(genDoc(7, 4, namesB, "busybox:1", secret)), "test")
	if !errors.Is(err, ErrStale) || !errors.Is(err, ErrConflict) {
		t.Errorf("Offer(older) = %v, want ErrStale and ErrConflict", err)
	}
}

// TestGenerationsCannotLieInAFile: the file source refuses the same
// conflicts, logs them, and keeps the declaration in force.
func TestGenerationsCannotLieInAFile(t *testing.T) {
	logs := &syncbuf.Buffer{}
	s := New(Config{Machine: "ace", Logger: newLogger(logs)})
	path := filepath.Join(t.TempDir(), "declaration.json")
	if err := os.WriteFile(path, []byte(genDoc(7, 3, namesA, "busybox:1", "x")), 0o600); err != nil {
		t.Fatal(err)
	}
	s.readPath(path, false)
	if err := os.WriteFile(path, []byte(genDoc(7, 3, namesA, "busybox:2", "x")), 0o600); err != nil {
		t.Fatal(err)
	}
	s.readPath(path, false)
	if d, _ := s.Current(); d.Containers[0].Image != "busybox:1" {
		t.Errorf("in force: image %s, want busybox:1 still", d.Containers[0].Image)
	}
	for _, w := range []string{"declaration refused; the previous one stays in force", "refusal=generation_reused", "containers[0].image: differs from generation 7 in force"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("the log does not say %q:\n%s", w, logs)
		}
	}
}

// TestTooLarge: a document over spec.MaxDocumentBytes is refused before it
// is parsed: 413 from the endpoint, counted, saying its size when the
// request said it (Content-Length) and that it exceeds the limit when the
// body had to be read to find out (it once said "is 67108865 bytes"
// whatever the size: what was read); a file of that size is not even
// read.
func TestTooLarge(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := New(Config{Registerer: reg})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	big := genDoc(1, 1, namesA, "busybox", strings.Repeat("x", spec.MaxDocumentBytes+1000))
	for i, tc := range []struct {
		name   string
		body   io.Reader // a strings.Reader's length is sent, another's is not
		reason string
	}{
		{"length said", strings.NewReader(big), fmt.Sprintf("the document is %d bytes; at most %d", len(big), spec.MaxDocumentBytes)},
		{"length unknown", io.MultiReader(strings.NewReader(big)), fmt.Sprintf("the document exceeds the limit: at most %d bytes", spec.MaxDocumentBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/declaration", tc.body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct{ Faults []spec.FieldError }
			json.NewDecoder(resp.Body).Decode(&got)
			if diff := cmp.Diff([]spec.FieldError{{Reason: tc.reason}}, got.Faults); resp.StatusCode != http.StatusRequestEntityTooLarge || diff != "" {
				t.Errorf("PUT %d bytes = %d, want 413; faults (-want +got):\n%s", len(big), resp.StatusCode, diff)
			}
			if got := refusedCounts(t, reg)[string(RefusedTooLarge)]; got != float64(i+1) {
				t.Errorf("refusals{reason=too_large} = %v, want %d", got, i+1)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	s.readPath(path, false)
	if got := refusedCounts(t, reg)[string(RefusedTooLarge)]; got != 3 {
		t.Errorf("refusals{reason=too_large} after the file = %v, want 3", got)
	}
}

func put(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url+"/v1/declaration", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Error  string `json:"error"`
		Faults []struct{ Path, Reason string }
	}
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &out)
	// The body, then each fault as an operator reads it: path: reason.
	lines := []string{string(raw)}
	for _, f := range out.Faults {
		lines = append(lines, (&spec.FieldError{Path: f.Path, Reason: f.Reason}).Error())
	}
	return resp.StatusCode, strings.Join(lines, "\n")
}

func newLogger(w *syncbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
