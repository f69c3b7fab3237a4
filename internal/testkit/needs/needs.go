// Package needs stops a test that lacks something of the machine it runs
// on (root, a tool, a service): outside CI the test is skipped, saying
// what is missing and how to get it; under CI=true it fails, since
// `make test` installs and starts everything the tests need, and a skip
// there would pass a suite that did not run.
package needs

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true), where nothing a
// test needs may be missing.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips t, or fails it under CI, with the message
// fmt.Sprintf(format, args...).
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatal(msg + " (CI=true: make test provides it)")
		return
	}
	t.Skip(msg)
}

// Root stops t unless it runs as root; why says what needs it.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "%s: needs root", why)
	}
}

// Tool returns the path of the command name, or stops t saying which
// Debian package provides it.
func Tool(t testing.TB, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not found; apt-get install %s (make test does)", name, debianPackage)
		return ""
	}
	return path
}
