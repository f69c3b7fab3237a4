package statedir_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/statedir"
)

// TestMain runs the lock holder of TestLockRefusesASecondAgent when asked.
func TestMain(m *testing.M) {
	if dir := os.Getenv("STATEDIR_TEST_HOLD"); dir != "" {
		if _, err := statedir.New(dir).Lock(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		bufio.NewReader(os.Stdin).ReadString('\n') // until the test ends it
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLockRefusesASecondAgent: while one process holds the state
// directory, another's Lock fails with ErrLocked, naming the directory
// and the holder's pid; once the holder is gone (killed: no clean exit)
// the directory can be taken. Within one process, a second Lock before
// Unlock fails too.
func TestLockRefusesASecondAgent(t *testing.T) {
	dir := statedir.New(t.TempDir())

	first, err := dir.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dir.Lock(); !errors.Is(err, statedir.ErrLocked) {
		t.Fatalf("a second Lock while the first is held: %v, want ErrLocked", err)
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STATEDIR_TEST_HOLD="+dir.Path())
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		cmd.Process.Kill()
		t.Fatalf("the holder says %q", line)
	}
	_, err = dir.Lock()
	if !errors.Is(err, statedir.ErrLocked) {
		t.Fatalf("Lock while another process holds the directory: %v, want ErrLocked", err)
	}
	for _, want := range []string{dir.Path(), "pid " + strconv.Itoa(cmd.Process.Pid)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not name %q", err, want)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := dir.Lock()
	if err != nil {
		t.Fatalf("Lock once the holder was killed: %v", err)
	}
	l.Unlock()
}
