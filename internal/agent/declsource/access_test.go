package declsource

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestGetRedacts: GET /v1/declaration shows the keys of env and labels,
// never their values; the declaration in force keeps them.
func TestGetRedacts(t *testing.T) {
	s := New(Config{Machine: "ace"})
	doc := `{"schema": 1, "machine": "ace", "generation": 1,
	  "roster": {"generation": 1, "zones": ["internal"], "names": {}},
	  "containers": [{"name": "db", "image": "postgres:16", "env": {"POSTGRES_PASSWORD": "s3cr3t-env"},
	    "labels": {"token": "s3cr3t-label"}}]}`
	if _, err := s.Offer([]byte(doc), "test"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/declaration")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := string(body)
	if resp.StatusCode != http.StatusOK || strings.Contains(got, "s3cr3t") ||
		!strings.Contains(got, `"POSTGRES_PASSWORD":"`+spec.RedactedValue+`"`) || !strings.Contains(got, `"token":"`+spec.RedactedValue+`"`) {
		t.Errorf("GET /v1/declaration = %d %s; want the keys with %q for values", resp.StatusCode, got, spec.RedactedValue)
	}
	if d, _ := s.Current(); d.Containers[0].Env["POSTGRES_PASSWORD"] != "s3cr3t-env" {
		t.Errorf("the declaration in force lost its value: %v", d.Containers[0].Env)
	}
}

// TestTokenGuard: on TCP every request needs the bearer token: 401
// without it, 403 with another, before the handler runs.
func TestTokenGuard(t *testing.T) {
	e, err := Listen("127.0.0.1:0", Access{Token: []byte("0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	served := 0
	srv := httptest.NewServer(e.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })))
	defer srv.Close()
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Basic MDEyMzQ1Njc4OWFiY2RlZg==", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer 0123456789abcdeF", http.StatusForbidden},
		{"Bearer 0123456789abcdef0", http.StatusForbidden},
		{"Bearer 0123456789abcdef", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/declaration", strings.NewReader("{}"))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("PUT with Authorization %q = %d, want %d", tc.auth, resp.StatusCode, tc.want)
		}
	}
	if served != 1 {
		t.Errorf("the handler ran %d times, want once (the right token only)", served)
	}
}
