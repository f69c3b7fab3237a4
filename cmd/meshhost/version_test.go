package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
)

// TestVersion: `meshhost --version` and `meshhost version` print the
// stamped build (buildinfo), and the JSON form names it field by field.
func TestVersion(t *testing.T) {
	bi := buildinfo.Get()
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, _ := runCLI(t, nil, args...)
		if want := "meshhost " + bi.String(); code != 0 || !strings.HasPrefix(out, want) {
			t.Errorf("meshhost %s = exit %d, %q; want exit 0, %q...", args[0], code, out, want)
		}
	}
	code, out, _ := runCLI(t, nil, "version", "--output", "json")
	var got struct{ Version, Commit, Go string }
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("meshhost version --output json = exit %d, %q (%v)", code, out, err)
	}
	if got.Version != bi.Version || got.Commit != bi.Commit || got.Go != bi.Go {
		t.Errorf("meshhost version --output json = %+v, want %+v", got, bi)
	}
}
