package doccheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/needs"
)

const (
	quickstartMark = "<!-- quickstart -->"
	outputMark     = "<!-- quickstart: output -->"
)

// quickstart returns the command blocks of text marked quickstartMark, and
// the lines of the blocks marked outputMark, in order: each mark is
// followed, after blank lines, by a fenced block.
func quickstart(text string) (commands []string, output []string, err error) {
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		mark := strings.TrimSpace(lines[i])
		if mark != quickstartMark && mark != outputMark {
			continue
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j == len(lines) || !strings.HasPrefix(lines[j], "```") {
			return nil, nil, fmt.Errorf("line %d: %s is not followed by a fenced block", i+1, mark)
		}
		var block []string
		for j++; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			block = append(block, lines[j])
		}
		if j == len(lines) {
			return nil, nil, fmt.Errorf("line %d: the block after %s is not closed", i+1, mark)
		}
		if mark == quickstartMark {
			commands = append(commands, strings.Join(block, "\n"))
		} else {
			output = append(output, block...)
		}
		i = j
	}
	return commands, output, nil
}

// inOrder reports the first line of want that does not appear, as a whole
// line of got, after the lines before it, or "" when all do.
func inOrder(want []string, got string) string {
	rest := strings.Split(got, "\n")
	for _, w := range want {
		k := 0
		for k < len(rest) && strings.TrimRight(rest[k], " ") != w {
			k++
		}
		if k == len(rest) {
			return w
		}
		rest = rest[k+1:]
	}
	return ""
}

func TestQuickstartBlocks(t *testing.T) {
	text := strings.Join([]string{
		"# Quickstart", "", quickstartMark, "```sh", "echo one", "echo two", "```",
		"prose", outputMark, "", "```text", "one", "```",
		"```sh", "echo not marked", "```",
		quickstartMark, "```sh", "echo three", "```",
	}, "\n")
	cmds, out, err := quickstart(text)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"echo one\necho two", "echo three"}; strings.Join(cmds, "|") != strings.Join(want, "|") {
		t.Errorf("commands = %q, want %q", cmds, want)
	}
	if len(out) != 1 || out[0] != "one" {
		t.Errorf("output = %q, want [one]", out)
	}
	if _, _, err := quickstart(quickstartMark + "\nnot a block\n"); err == nil {
		t.Error("a mark without a block: no error")
	}
	if w := inOrder([]string{"a", "c"}, "a\nb\nc\n"); w != "" {
		t.Errorf("inOrder(a, c) in a b c: missing %q", w)
	}
	if w := inOrder([]string{"c", "a"}, "a\nb\nc\n"); w != "a" {
		t.Errorf("inOrder(c, a) in a b c = %q, want a (out of order)", w)
	}
}

// TestQuickstart runs the README's quickstart as it is written: its
// blocks marked quickstartMark, in order, as one bash script (set -euo
// pipefail), from the top of the checkout, and checks that the lines of
// the blocks marked outputMark appear in what it prints, in order.
//
// It runs on the agent's embedded in-memory runtime (the quickstart asks
// for no podman), in a network namespace of its own (unshare --net, its
// loopback brought up): the ports the quickstart names are free there
// whatever else runs on the machine, and nothing it sends leaves it. Its
// TMPDIR is the test's, so the quickstart's mktemp scratch directory is
// removed with the test's; it gets at most 3 minutes, and the whole
// process group is killed after it, leaving no agent behind.
func TestQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs an agent")
	}
	needs.Root(t, "the quickstart runs in a network namespace of its own")
	for _, tool := range []struct{ name, pkg string }{
		{"unshare", "util-linux"}, {"ip", "iproute2"}, {"dig", "bind9-dnsutils"},
		{"curl", "curl"}, {"make", "make"}, {"go", "golang (Go 1.26)"},
	} {
		needs.Tool(t, tool.name, tool.pkg)
	}
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, want, err := quickstart(string(data))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(cmds) == 0 {
		t.Fatalf("README.md has no block marked %s: the quickstart is not tested", quickstartMark)
	}
	tmp := t.TempDir()
	script := filepath.Join(tmp, "quickstart.sh")
	// On a failure the script exits at once (set -e), and its trap ends
	// what it started in the background (the agent), which would otherwise
	// hold its output open.
	body := "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + strings.Join(cmds, "\n") + "\n"
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--", "bash", "-c",
		`ip link set lo up && exec bash "$0"`, script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second // a process left behind holding the output: stop reading it
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // an agent the script left behind
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("the quickstart did not finish within 3 minutes; it printed:\n%s", out.String())
	}
	if err != nil {
		t.Fatalf("the quickstart failed (%v); the script:\n%s\nit printed:\n%s", err, body, out.String())
	}
	if missing := inOrder(want, out.String()); missing != "" {
		t.Errorf("the quickstart's output lacks %q (after the lines before it in README.md); it printed:\n%s", missing, out.String())
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "tmp.*")); len(left) > 0 {
		t.Errorf("the quickstart left %v: its clean-up block does not remove what it made", left)
	}
}
