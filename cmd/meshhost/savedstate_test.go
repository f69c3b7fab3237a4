package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/dnstest"
)

// TestAgentStartsOnItsSavedDeclaration runs `meshhost agent --runtime
// memory` in-process on a state directory an older meshhost left, with a
// declaration it saved before the pass that went wrong (issue 17):
//   - a roster naming one of its zones (bug 3), which crash-looped the
//     agent at every start: it starts, applies it, and the name resolves;
//   - a container named NAME.meshhost-old (bug 5), which failed every
//     pass and which this meshhost refuses at parse time: the agent starts
//     all the same, says why it ignores the saved declaration, serves the
//     saved roster, and applies the next declaration pushed.
func TestAgentStartsOnItsSavedDeclaration(t *testing.T) {
	for _, tc := range []struct {
		name       string
		containers string
		names      string
		refused    bool
	}{
		{"zone apex name", `{"name": "app", "image": "busybox"}`, `"internal": ["10.9.9.9"], "alpha.internal": ["10.1.1.1"]`, false},
		{"reserved container name", `{"name": "app.meshhost-old", "image": "busybox"}`, `"alpha.internal": ["10.1.1.1"]`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			decl := fmt.Sprintf(`{"schema": 1, "machine": "saved", "generation": 5, "mesh_names": "off",
			  "roster": {"generation": 5, "zones": ["internal"], "names": {%s}}, "containers": [%s]}`, tc.names, tc.containers)
			if err := os.WriteFile(statedir.New(state).Declaration(), []byte(decl), 0o600); err != nil {
				t.Fatal(err)
			}
			// The resolver's own saved roster, an older one.
			if err := os.WriteFile(statedir.New(state).Roster(), []byte(`{"generation": 4, "zones": ["internal"], "names": {"alpha.internal": ["10.1.1.1"]}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(t.TempDir(), "push.sock")
			dnsAddr := dnstest.FreePort(t)
			logs, done, _ := fltInProcess(t, "--runtime", "memory", "--machine", "saved", "--state", state, "--push", "unix:"+sock,
				"--http", "off", "--listen", dnsAddr.String(), "--interval", "200ms", "--upstream", "127.0.0.1:9")
			if tc.refused {
				eventually(t, "the agent says it ignores the saved declaration, and serves the saved roster", 20*time.Second, func() bool {
					return strings.Contains(logs.String(), "the saved declaration is refused") && lookup(dnsAddr, "alpha.internal.") == "10.1.1.1"
				})
				if strings.Contains(logs.String(), `msg="pass failed"`) {
					t.Errorf("a pass failed:\n%s", logs.String())
				}
				good := strings.Replace(strings.Replace(decl, "app.meshhost-old", "app", 1), `"generation": 5, "mesh_names"`, `"generation": 6, "mesh_names"`, 1)
				if err := fltPusher(sock)(good); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, "the declaration is applied and the apex name resolves", 20*time.Second, func() bool {
				return strings.Contains(logs.String(), `msg="declaration applied"`) &&
					(tc.refused || lookup(dnsAddr, "internal.") == "10.9.9.9")
			})
			select {
			case <-done:
				t.Fatalf("the agent stopped:\n%s", logs.String())
			default:
			}
			if strings.Contains(logs.String(), "panic") {
				t.Errorf("the agent panicked:\n%s", logs.String())
			}
		})
	}
}
