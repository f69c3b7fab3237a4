package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStatusShowsHeldRosterAndSetAsideLogs: meshhost status names a roster
// the guard holds, with the command that releases it, and every damaged log
// set aside, in text and JSON; a state directory with neither shows
// neither.
func TestStatusShowsHeldRosterAndSetAsideLogs(t *testing.T) {
	state := t.TempDir()
	if code, out, _ := runCLI(t, nil, "status", "--state", state); code != 0 || strings.Contains(out, "ROSTER HELD") || strings.Contains(out, "DAMAGED") {
		t.Fatalf("status of an empty state directory = %d:\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(state, "roster-held"), []byte(`{"served":4,"newest":7}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	aside := []string{
		filepath.Join(state, "declaration.log.corrupt-20261204T000000.000000000Z"),
		filepath.Join(state, "journal", "rosters", "001.log.corrupt-20261204T000001.000000000Z"),
	}
	for _, f := range aside {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI(t, nil, "status", "--state", state)
	if code != 0 {
		t.Fatalf("status = %d: %s%s", code, out, errOut)
	}
	for _, want := range append([]string{"ROSTER HELD: the change from roster generation 4 to 7", "meshhost roster accept 7 releases it"}, aside...) {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, nil, "status", "--state", state, "--output", "json")
	var got struct {
		RosterHeld struct{ Served, Newest uint64 } `json:"roster_held"`
		SetAside   []string                        `json:"set_aside"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("status --output json = %d, %v:\n%s", code, err, out)
	}
	if got.RosterHeld.Served != 4 || got.RosterHeld.Newest != 7 {
		t.Errorf("roster_held = %+v, want served 4, newest 7", got.RosterHeld)
	}
	if diff := cmp.Diff(aside, got.SetAside); diff != "" {
		t.Errorf("set_aside (-want +got):\n%s", diff)
	}
}
