package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestManPagesListTheConfigExit: the page of every command that exits
// exitConfig (the agent, config check, and the commands that read the
// agent's configuration) lists it under EXIT STATUS, and no other
// command's page does (the root page lists every code).
func TestManPagesListTheConfigExit(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1796000000")
	dir := t.TempDir()
	if code, _, stderr := runCLI(t, nil, "man", "--dir", dir); code != 0 {
		t.Fatalf("meshhost man = exit %d\n%s", code, stderr)
	}
	exits := map[string]bool{"meshhost": true, "meshhost-agent": true, "meshhost-config": true, "meshhost-resolver": true}
	for name := range operatorConfigKeys {
		exits["meshhost-"+name] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	entry := ".TP\n.B " + strconv.Itoa(exitConfig) + "\n"
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		page := strings.TrimSuffix(e.Name(), filepath.Ext(e.Name()))
		_, status, _ := strings.Cut(string(b), ".SH EXIT STATUS\n")
		status, _, _ = strings.Cut(status, "\n.SH ")
		if got := strings.Contains(status, entry); got != exits[page] {
			t.Errorf("%s lists exit %d: %v, want %v\n%s", e.Name(), exitConfig, got, exits[page], status)
		}
	}
}
