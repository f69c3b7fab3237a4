package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestUnstamped: a test binary is built without -X: a version and a commit
// are still reported, never empty.
func TestUnstamped(t *testing.T) {
	in := Get()
	if in.Version == "" || in.Commit == "" {
		t.Errorf("Get() = %+v, want a version and a commit (fallbacks)", in)
	}
	if in.Go != runtime.Version() {
		t.Errorf("Get().Go = %q, want %q", in.Go, runtime.Version())
	}
}

// TestStamped builds testdata/stamped with the linker flags the Makefile
// uses and checks that what they stamp is what Get reports.
func TestStamped(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("testdata", "stamped")
	bin := filepath.Join(dir, "stamped")
	const pkg = "github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	ldflags := "-s -w -X " + pkg + ".version=v1.2.3-4-gabcdef0 -X " + pkg + ".commit=abcdef0123456789abcdef0123456789abcdef01"
	build := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "./"+src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "v1.2.3-4-gabcdef0 abcdef0123456789abcdef0123456789abcdef01 " + runtime.Version() +
		" v1.2.3-4-gabcdef0 (commit abcdef012345, " + runtime.Version() + ")"
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("stamped binary printed\n%q\nwant\n%q", got, want)
	}
}
