package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
)

// TestJournalPriorities runs the binary as systemd would with its stderr
// connected to the journal (JOURNAL_STREAM naming that stream's device and
// inode; here a file stands in for the journal's socket), and refuses it a
// roster: every log line carries its syslog priority, the refusal <3>, the
// rest not, so that `journalctl -p err` shows exactly the errors. With
// stderr redirected elsewhere (JOURNAL_STREAM naming another stream), no
// prefix.
func TestJournalPriorities(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "meshhost-resolver")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	roster := filepath.Join(dir, "roster", "roster.json")
	os.Mkdir(filepath.Dir(roster), 0o755)
	good := func(t *testing.T) {
		if err := os.WriteFile(roster, []byte(`{"generation": 1, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"]}}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			good(t)
			logPath := filepath.Join(dir, "stderr-"+format)
			logf, err := os.Create(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			var st syscall.Stat_t
			if err := syscall.Fstat(int(logf.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "--roster", roster, "--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9", "--log-format", format)
			cmd.Stderr = logf
			cmd.Env = append(os.Environ(), fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			read := func() string { b, _ := os.ReadFile(logPath); return string(b) }
			waitFor(t, "serving", read, "serving on")
			// A roster that fails validation: refused, logged as an error.
			if err := os.WriteFile(roster+".tmp", []byte(`{"generation": 2, "zones": ["internal"], "names": {"bad name!.internal": ["10.89.0.8"]}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(roster+".tmp", roster); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the refusal", read, "roster refused")
			var errs, others int
			for _, l := range strings.Split(strings.TrimSpace(read()), "\n") {
				if strings.Contains(l, ": serving on ") {
					continue // not a log record: the unit's default priority
				}
				switch {
				case strings.HasPrefix(l, "<3>"):
					errs++
					if !strings.Contains(l, "roster refused") {
						t.Errorf("an error line that is not the refusal: %q", l)
					}
				case strings.HasPrefix(l, "<6>") || strings.HasPrefix(l, "<4>") || strings.HasPrefix(l, "<7>"):
					others++
					if strings.Contains(l, "time") {
						t.Errorf("a line with a time of its own under the journal: %q", l)
					}
				default:
					t.Errorf("a line without its priority: %q", l)
				}
			}
			if errs != 1 || others == 0 {
				t.Errorf("%d error lines and %d others, want 1 and some:\n%s", errs, others, read())
			}
		})
	}
	// The line the binary writes itself when it ends with an error.
	t.Run("exit", func(t *testing.T) {
		logPath := filepath.Join(dir, "stderr-exit")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		var st syscall.Stat_t
		if err := syscall.Fstat(int(logf.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--roster", filepath.Join(dir, "missing", "roster.json"), "--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9")
		cmd.Stderr = logf
		cmd.Env = append(os.Environ(), fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
		if err := cmd.Run(); err == nil {
			t.Fatal("meshhost-resolver with a missing roster exited 0")
		}
		b, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, "<3>meshhost-resolver: ") {
			t.Errorf("the last line of a failed start = %q, want it at priority 3", last)
		}
	})
	t.Run("redirected", func(t *testing.T) {
		good(t)
		logPath := filepath.Join(dir, "stderr-redirected")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(bin, "--roster", roster, "--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9")
		cmd.Stderr = logf
		cmd.Env = append(os.Environ(), "JOURNAL_STREAM=1:1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		read := func() string { b, _ := os.ReadFile(logPath); return string(b) }
		waitFor(t, "serving", read, "serving on")
		if strings.Contains(read(), "<6>") || !strings.Contains(read(), "time=") {
			t.Errorf("stderr not the journal's stream, yet:\n%s", read())
		}
	})
}

func waitFor(t *testing.T, what string, read func() string, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(read(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s (%q) within 20 s; stderr:\n%s", what, want, read())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
