package control

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

// TestRosterBodyLimit: PUT and PATCH /v1/roster take at most
// spec.MaxDocumentBytes, the limit of every roster document however it
// arrives; one byte more is refused as too large (413) unread.
func TestRosterBodyLimit(t *testing.T) {
	dir := t.TempDir()
	cs, err := NewServer(Config{Resolver: newResolver(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	over := bytes.Repeat([]byte(" "), spec.MaxDocumentBytes+1)
	for _, method := range []string{http.MethodPut, http.MethodPatch} {
		rec := httptest.NewRecorder()
		cs.Handler().ServeHTTP(rec, httptest.NewRequest(method, "/v1/roster", bytes.NewReader(over)))
		if rec.Code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s /v1/roster of %d bytes = %d %s, want 413", method, len(over), rec.Code, rec.Body)
		}
	}
}
