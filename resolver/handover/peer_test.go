package handover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// predecessorEnv makes the test binary a predecessor serving the handover
// socket at its value (TestForeignPredecessor runs it as another uid).
const predecessorEnv = "HANDOVER_TEST_PREDECESSOR"

// TestForeignPredecessorHelper is the predecessor of TestForeignPredecessor
// when run by it; otherwise it does nothing.
func TestForeignPredecessorHelper(t *testing.T) {
	path := os.Getenv(predecessorEnv)
	if path == "" {
		t.Skip("run by TestForeignPredecessor")
	}
	l, err := Listen(path)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	r, w, _ := os.Pipe()
	defer r.Close()
	src := &fakeSource{files: func() []File { return []File{{Name: "pipe", File: w}} }}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { bufio.NewReader(os.Stdin).ReadString('\n'); cancel() }()
	fmt.Println("serving")
	Serve(ctx, l, src, "v-foreign", slog.New(slog.DiscardHandler))
	p, _, _ := src.counts()
	fmt.Println("prepared", p)
	os.Exit(0)
}

// TestForeignPredecessor: a successor (root) refuses a handover socket
// served by another uid (65534): whoever hands the sockets over decides
// what the successor serves. Take fails naming the uid, before it asks
// for anything: the predecessor prepares nothing.
func TestForeignPredecessor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a predecessor as uid 65534: needs root")
	}
	dir, err := os.MkdirTemp("", "handover-peer-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	bin := filepath.Join(dir, "handover.test") // where uid 65534 may run it
	if data, err := os.ReadFile(os.Args[0]); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "handover.sock")
	cmd := exec.Command(bin, "-test.run=^TestForeignPredecessorHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), predecessorEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	rd := bufio.NewReader(out)
	if line, _ := rd.ReadString('\n'); strings.TrimSpace(line) != "serving" {
		t.Fatalf("the predecessor says %q", line)
	}
	s, files, err := Take(context.Background(), path, "v")
	if err == nil {
		s.Abort()
		for _, f := range files {
			f.File.Close()
		}
		t.Fatal("Take from a predecessor of uid 65534 succeeded")
	}
	if errors.Is(err, ErrNoPredecessor) || !strings.Contains(err.Error(), "refusing uid 65534") {
		t.Errorf("Take from a predecessor of uid 65534 = %v, want a refusal naming the uid", err)
	}
	stdin.Close()
	rest := ""
	for {
		line, err := rd.ReadString('\n')
		rest += line
		if err != nil {
			break
		}
	}
	cmd.Wait()
	if !strings.Contains(rest, "prepared 0") {
		t.Errorf("the predecessor after the refused Take: %q, want it to have prepared nothing", rest)
	}
}
