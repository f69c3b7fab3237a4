package declsource

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/spec"
)

// TestDeltaFaultsBounded: a delta removing 200,000 names the roster lacks
// is refused with spec.MaxFaults faults and a count of the rest, in the
// reply and in the log line (one fault per name once made a 122 MB line).
func TestDeltaFaultsBounded(t *testing.T) {
	logs := &syncbuf.Buffer{}
	s := New(Config{Machine: "ace", Logger: newLogger(logs)})
	if _, err := s.Offer([]byte(genDoc(1, 1, namesA, "busybox:1", "pw")), "test"); err != nil {
		t.Fatal(err)
	}
	const n = 200_000
	var doc strings.Builder
	doc.WriteString(`{"schema": 1, "machine": "ace", "generation": 2, "roster_delta": {"from": 1, "generation": 2, "remove": [`)
	for i := range n {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `"gone%06d.internal"`, i)
	}
	doc.WriteString(`]}}`)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	code, body := put(t, srv.URL, doc.String())
	lines := faultLines(body)
	if code != http.StatusBadRequest || len(lines) != spec.MaxFaults+1 {
		t.Fatalf("PUT (%d unknown names removed) = %d with %d faults, want 400 with %d", n, code, len(lines), spec.MaxFaults+1)
	}
	if want := `roster_delta.remove[0]: "gone000000.internal" is not in roster generation 1`; lines[0] != want {
		t.Errorf("first fault = %q, want %q", lines[0], want)
	}
	if want := fmt.Sprintf("and %d more faults", n-spec.MaxFaults); lines[len(lines)-1] != want {
		t.Errorf("last fault = %q, want %q", lines[len(lines)-1], want)
	}
	if size := len(logs.String()); size > 64<<10 {
		t.Errorf("the refusal logged %d bytes, want a bounded line", size)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("and %d more faults", n-spec.MaxFaults)) {
		t.Errorf("the log does not say how many faults it left out:\n%.2000s", logs)
	}
}

// faultLines is the faults of a body put returns, one per line.
func faultLines(body string) []string {
	_, faults, _ := strings.Cut(body, "\n")
	return strings.Split(strings.TrimPrefix(faults, "\n"), "\n")
}
