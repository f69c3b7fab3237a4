package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/natssource"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// TestPublishPrintPermissions: what --print-permissions prints is
// natssource.Permissions for the buckets of --nats-buckets, byte for byte
// (the configuration natssource's TestPermissionsMachineReadsOnlyItsOwn
// runs a server with and proves), and the server takes it as its whole
// configuration file.
func TestPublishPrintPermissions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		prefix   string
		machines []string
	}{
		{"default buckets", []string{"--print-permissions", "ace", "bay-2"}, natssource.DefaultPrefix, []string{"ace", "bay-2"}},
		{"other buckets", []string{"--nats-buckets", "prod", "--print-permissions", "ace"}, "prod", []string{"ace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := publishCmd(t, tc.args...)
			want, err := natssource.Permissions(natssource.LayoutFor(tc.prefix), tc.machines)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Fatalf("meshhost publish %v printed:\n%s\nwant natssource.Permissions:\n%s", tc.args, got, want)
			}
			bin := os.Getenv("MESHHOST_NATS_SERVER")
			if bin == "" {
				needs.Missing(t, `MESHHOST_NATS_SERVER is not set; run eval "$(scripts/nats-up)" first`)
			}
			path := filepath.Join(t.TempDir(), "server.conf")
			if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-t", "-c", path)
			cmd.Env = append(os.Environ(), natssource.ControllerPasswordVar+"=x")
			for _, m := range tc.machines {
				cmd.Env = append(cmd.Env, natssource.MachinePasswordVar(m)+"=x")
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s -t -c (the printed configuration): %v\n%s", bin, err, out)
			}
		})
	}
}

// TestPublishPrintPermissionsRefusals: no machine, a name that is no
// machine's, a machine named twice, or machines named without
// --print-permissions: a usage error naming the fault, nothing printed.
func TestPublishPrintPermissionsRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no machine", []string{"--print-permissions"}, "name the machines"},
		{"bad name", []string{"--print-permissions", "Ace"}, `machine "Ace"`},
		{"dotted name", []string{"--print-permissions", "a.b"}, `machine "a.b"`},
		{"wildcard", []string{"--print-permissions", ">"}, `machine ">"`},
		{"twice", []string{"--print-permissions", "ace", "ace"}, "named twice"},
		{"without the flag", []string{"ace"}, "only with --print-permissions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut syncbuf.Buffer
			env := &environment{stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
			code := run(context.Background(), env, append([]string{"publish"}, tc.args...))
			if code != exitUsage {
				t.Errorf("exit %d, want %d (usage)", code, exitUsage)
			}
			if out.String() != "" {
				t.Errorf("printed %q", out.String())
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("error %q, want it to say %q", errOut.String(), tc.want)
			}
		})
	}
}
