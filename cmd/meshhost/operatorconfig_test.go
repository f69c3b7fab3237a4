package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorCommandsReadAgentConfig: the operator commands take the
// agent's state directory and podman socket from its configuration file,
// given by --config or found at the default path; their own flags win;
// a broken file is a configuration fault.
func TestOperatorCommandsReadAgentConfig(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "cfgstate") // does not exist: each command names it
	sock := filepath.Join(dir, "cfg-podman.sock")
	path := filepath.Join(dir, "agent.toml")
	os.WriteFile(path, []byte("state = \""+state+"\"\npodman = \"unix://"+sock+"\"\nmachine = \"ace\"\nresolver = \"embedded\"\nruntime = \"podman\"\n"), 0o644)
	broken := filepath.Join(dir, "broken.toml")
	os.WriteFile(broken, []byte("stat = \"/x\"\n"), 0o644)
	run1 := func(defaultPath string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		env := &environment{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, defaultConfig: defaultPath}
		return run(context.Background(), env, args), errb.String()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, state},
		{[]string{"explain", "web"}, state},
		{[]string{"dns-check", "web", "a.internal"}, state},
		{[]string{"migrate", "status"}, state},
		{[]string{"status"}, state},
		{[]string{"history"}, state},
		{[]string{"roster", "diff", "1", "2"}, state},
		{[]string{"freeze"}, state},
		{[]string{"unfreeze"}, state},
		{[]string{"approve", "3"}, state},
		{[]string{"rollback", "3"}, state},
		{[]string{"probe"}, sock},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if code, stderr := run1(filepath.Join(dir, "none.toml"), append(tc.args, "--config", path)...); code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("--config: exit %d, %q; want the configuration's %s", code, stderr, tc.want)
			}
			if code, stderr := run1(path, tc.args...); code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("the default configuration: exit %d, %q; want its %s", code, stderr, tc.want)
			}
			if code, stderr := run1(filepath.Join(dir, "none.toml"), tc.args...); strings.Contains(stderr, tc.want) {
				t.Errorf("no configuration file: exit %d, %q; want nothing of %s", code, stderr, tc.want)
			}
			if code, stderr := run1(broken, tc.args...); code != exitConfig || !strings.Contains(stderr, "broken.toml:1: stat: unknown key") {
				t.Errorf("a broken configuration: exit %d, %q; want exit %d naming its fault", code, stderr, exitConfig)
			}
		})
	}
	other := filepath.Join(dir, "flagstate")
	if code, stderr := run1(path, "status", "--state", other); code == 0 || !strings.Contains(stderr, other) {
		t.Errorf("status --state %s with a configuration: exit %d, %q; want the flag's directory", other, code, stderr)
	}
}
