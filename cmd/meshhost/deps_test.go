package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
)

// TestAgentOutlivesMissingDependencies: an agent whose podman socket and
// resolver control socket are both missing does not exit. It says why on
// /livez and /readyz (at once, never waiting), counts both dependencies
// down, keeps retrying, takes SIGHUP as a reload, and stops cleanly (0)
// when told. Bad flags still end it (2).
func TestAgentOutlivesMissingDependencies(t *testing.T) {
	dir := t.TempDir()
	httpAddr := dnstest.FreePort(t)
	level := filepath.Join(dir, "level")
	os.WriteFile(level, []byte("info\n"), 0o644)
	logs, done, stop := fltInProcess(t, "--runtime", "podman", "--podman", "unix://"+filepath.Join(dir, "no-podman.sock"),
		"--resolver", "unix:"+filepath.Join(dir, "no-resolver.sock"), "--machine", "m", "--state", filepath.Join(dir, "state"),
		"--http", httpAddr.String(), "--push", "off", "--log-level-file", level)
	eventually(t, "the agent serves its health", 20*time.Second, func() bool { code, _ := probeOf(httpAddr, "/livez"); return code != 0 })
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatalf("the agent exited with its dependencies missing:\n%s", logs.String())
		default:
		}
		for path, want := range map[string]string{"/livez": "resolver", "/readyz": "podman", "/healthz": "podman"} {
			start := time.Now()
			code, body := probeOf(httpAddr, path)
			if took := time.Since(start); took > time.Second {
				t.Errorf("GET %s took %v", path, took)
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
				t.Errorf("GET %s = %d %q, want 503 naming the %s", path, code, body, want)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	resp, err := http.Get("http://" + httpAddr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`meshhost_agent_dependency_up{dependency="podman"} 0`, `meshhost_agent_dependency_up{dependency="resolver"} 0`} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if n := strings.Count(logs.String(), "podman's API does not answer; retrying"); n < 2 {
		t.Errorf("%d retries of podman logged in 5s, want at least 2", n)
	}

	os.WriteFile(level, []byte("debug\n"), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP) // the agent's handler takes it
	eventually(t, "the agent reloads on SIGHUP", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "SIGHUP: reloading") && strings.Contains(logs.String(), "level=DEBUG")
	})
	select {
	case <-done:
		t.Fatal("the agent exited on SIGHUP")
	default:
	}
	stop()
	if !strings.Contains(logs.String(), "=== agent returned 0") {
		t.Errorf("the agent did not return 0 when stopped:\n%s", logs.String())
	}
}

func TestAgentBadFlagsEndIt(t *testing.T) {
	for _, args := range [][]string{
		{"--resolver", "tcp:127.0.0.1:1"},
		{"--resolver", "unix:/x.sock", "--upstream", "127.0.0.1:53"},
		{"--runtime", "docker"},
		{"--log-level-file", "/nonexistent/level"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			env := &environment{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
			if code := run(t.Context(), env, append([]string{"agent", "--state", t.TempDir(), "--http", "off", "--push", "off"}, args...)); code != exitConfig {
				t.Errorf("agent %v = %d, want %d (configuration)", args, code, exitConfig)
			}
		})
	}
}

// TestAgentSIGHUPReloadsConfigLogLevel: run by its configuration file (as
// the package's unit runs it), the agent takes the file's log-level again
// on SIGHUP; a file broken since the start changes nothing and says why.
func TestAgentSIGHUPReloadsConfigLogLevel(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "agent.toml")
	write := func(level string) {
		t.Helper()
		body := fmt.Sprintf("runtime = \"memory\"\nmachine = \"m\"\nstate = %q\nhttp = \"off\"\npush = \"off\"\nlisten = [%q]\nupstream = [\"127.0.0.1:9\"]\n%s",
			filepath.Join(dir, "state"), dnstest.FreePort(t).String(), level)
		if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`log-level = "info"` + "\n")
	logs, done, stop := fltInProcess(t, "--config", config)
	eventually(t, "the agent starts", 20*time.Second, func() bool { return strings.Contains(logs.String(), "resolver") })

	write(`log-level = "debug"` + "\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	eventually(t, "the file's log level taken on SIGHUP", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), `msg="log level" new_level=DEBUG`)
	})

	write("log-levell = \"warn\"\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	eventually(t, "a broken file refused on SIGHUP", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "SIGHUP: keeping the log level") && strings.Contains(logs.String(), "log-levell")
	})
	select {
	case <-done:
		t.Fatalf("the agent exited on SIGHUP:\n%s", logs.String())
	default:
	}
	stop()
}
