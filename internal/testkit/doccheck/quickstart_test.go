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
	"github.com/meshhost/meshhost/internal/testkit/podmantest"
)

// blocks returns the command blocks of text marked <!-- name -->, and the
// lines of the blocks marked <!-- name: output -->, in order: each mark is
// followed, after blank lines, by a fenced block. Other marks (<!-- name:
// setup -->, a step the test provides itself) are not run.
func blocks(text, name string) (commands []string, output []string, err error) {
	runMark, outputMark := "<!-- "+name+" -->", "<!-- "+name+": output -->"
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		mark := strings.TrimSpace(lines[i])
		if mark != runMark && mark != outputMark {
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
		if mark == runMark {
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

func TestBlocks(t *testing.T) {
	text := strings.Join([]string{
		"# Quickstart", "", "<!-- quickstart -->", "```sh", "echo one", "echo two", "```",
		"prose", "<!-- quickstart: output -->", "", "```text", "one", "```",
		"```sh", "echo not marked", "```",
		"<!-- quickstart: setup -->", "```sh", "echo set up by the test", "```",
		"<!-- walkthrough -->", "```sh", "echo another's", "```",
		"<!-- quickstart -->", "```sh", "echo three", "```",
	}, "\n")
	cmds, out, err := blocks(text, "quickstart")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"echo one\necho two", "echo three"}; strings.Join(cmds, "|") != strings.Join(want, "|") {
		t.Errorf("commands = %q, want %q", cmds, want)
	}
	if len(out) != 1 || out[0] != "one" {
		t.Errorf("output = %q, want [one]", out)
	}
	if _, _, err := blocks("<!-- quickstart -->\nnot a block\n", "quickstart"); err == nil {
		t.Error("a mark without a block: no error")
	}
	if w := inOrder([]string{"a", "c"}, "a\nb\nc\n"); w != "" {
		t.Errorf("inOrder(a, c) in a b c: missing %q", w)
	}
	if w := inOrder([]string{"c", "a"}, "a\nb\nc\n"); w != "a" {
		t.Errorf("inOrder(c, a) in a b c = %q, want a (out of order)", w)
	}
}

// runBlocks runs the blocks of the markdown file doc marked name, as it is
// written: in order, as one bash script (set -euo pipefail), from the top
// of the checkout, and checks that the lines of the blocks marked
// "name: output" appear in what it prints, in order.
//
// It runs in a network namespace of its own (unshare --net, its loopback
// brought up): the ports the blocks name are free there whatever else runs
// on the machine, and nothing they send leaves it (a unix socket, such as
// podman's, still reaches the machine's services). Its TMPDIR is the
// test's, so a mktemp scratch directory goes with the test's; it gets at
// most limit, a trap ends what the script started in the background when
// it exits (an agent would hold its output open), and the whole process
// group is killed after it.
func runBlocks(t *testing.T, doc, name string, limit time.Duration, env ...string) {
	t.Helper()
	needs.Root(t, "the blocks run in a network namespace of their own")
	for _, tool := range []struct{ name, pkg string }{
		{"unshare", "util-linux"}, {"ip", "iproute2"}, {"dig", "bind9-dnsutils"},
		{"curl", "curl"}, {"make", "make"}, {"go", "golang (Go 1.26)"},
	} {
		needs.Tool(t, tool.name, tool.pkg)
	}
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	cmds, want, err := blocks(string(data), name)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	if len(cmds) == 0 {
		t.Fatalf("%s has no block marked <!-- %s -->: it is not tested", doc, name)
	}
	tmp := t.TempDir()
	script := filepath.Join(tmp, name+".sh")
	body := "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + strings.Join(cmds, "\n") + "\n"
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--", "bash", "-c",
		`ip link set lo up && exec bash "$0"`, script)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second // a process left behind holding the output: stop reading it
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything the script left behind
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("%s's %s did not finish within %v; it printed:\n%s", doc, name, limit, out.String())
	}
	if err != nil {
		t.Fatalf("%s's %s failed (%v); the script:\n%s\nit printed:\n%s", doc, name, err, body, out.String())
	}
	if missing := inOrder(want, out.String()); missing != "" {
		t.Errorf("%s's %s: the output lacks %q (after the lines before it in %s); it printed:\n%s", doc, name, missing, doc, out.String())
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*.*")); len(left) > 1 { // the script itself
		t.Errorf("%s's %s left %v: its clean-up block does not remove what it made", doc, name, left)
	}
}

// TestQuickstart runs the README's quickstart (<!-- quickstart --> blocks)
// as written, on the agent's embedded in-memory runtime: it asks for no
// podman.
func TestQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs an agent")
	}
	runBlocks(t, "README.md", "quickstart", 3*time.Minute)
}

// TestPodmanWalkthrough runs the operator guide's "Five minutes with the
// agent on podman" (<!-- walkthrough --> blocks) as written, against the
// podman service the tests use (MESHHOST_PODMAN_SOCKET), which stands in for
// its <!-- walkthrough: setup --> block (scripts/podman-up, which make test
// has run). The containers and the volume it makes are removed after it,
// whether or not its own clean-up block ran.
func TestPodmanWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs the agent against podman")
	}
	socket := podmantest.Socket(t)
	podman := needs.Tool(t, "podman", "podman")
	remove := func() {
		_ = exec.Command(podman, "--url", socket, "rm", "-f", "-t", "0", "walkthrough-web", "walkthrough-db").Run()
		_ = exec.Command(podman, "--url", socket, "volume", "rm", "-f", "walkthrough-db-data").Run()
	}
	remove() // a run killed before its clean-up
	t.Cleanup(remove)
	runBlocks(t, "docs/operator.md", "walkthrough", 4*time.Minute, "MESHHOST_PODMAN_SOCKET="+socket)
}
