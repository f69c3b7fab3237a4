package deptest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// hostAgentExample is the host agent built outside the module, from public
// packages only: a module of its own, which replaces this one with the
// checkout it lives in.
const hostAgentExample = "examples/hostagent"

// TestHostAgentExample: examples/hostagent, a module of its own, builds
// against this checkout from its public packages only (its module path is
// outside this one's, so the go command refuses an internal import) and,
// run, prints what
// its passes decided (output.txt beside it). It builds offline, from the
// module cache (GOPROXY=off), with the go.mod and go.sum it has
// (-mod=readonly: a test never rewrites them). And the module's own
// patterns (./..., what go test and go vet are given) do not reach into it.
func TestHostAgentExample(t *testing.T) {
	mod, pkgs := List(t, "./...")
	for path := range pkgs {
		if strings.HasPrefix(path, mod+"/examples/") {
			t.Errorf("./... lists %s: the example module is part of this one; it must keep a go.mod of its own", path)
		}
	}
	dir := filepath.Join(filepath.Dir(pkgs[mod+"/spec"].Dir), filepath.FromSlash(hostAgentExample))
	want, err := os.ReadFile(filepath.Join(dir, "output.txt"))
	if err != nil {
		t.Fatal(err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	// 10 minutes: a cold build cache builds meshhost and its dependencies.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	list := exec.CommandContext(ctx, gobin, "list", "-m")
	list.Dir = dir
	list.Env = offline(os.Environ())
	path, err := list.Output()
	if err != nil {
		t.Fatalf("go list -m in %s: %v", hostAgentExample, err)
	}
	if p := strings.TrimSpace(string(path)); p == mod || strings.HasPrefix(p, mod+"/") {
		t.Fatalf("%s's module is %s, under %s: the go command would let it import %s's internal packages; give it a path of its own (example.com/...)", hostAgentExample, p, mod, mod)
	}
	bin := filepath.Join(t.TempDir(), "hostagent")
	for _, args := range [][]string{{"vet", "."}, {"build", "-o", bin, "."}} {
		cmd := exec.CommandContext(ctx, gobin, args...)
		cmd.Dir = dir
		cmd.Env = offline(os.Environ())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in %s (GOPROXY=off GOFLAGS=-mod=readonly): %v\n%s\n"+
				"If its go.mod or go.sum is stale (a dependency of meshhost moved), bring them up to date: "+
				"cd %s && go mod tidy (offline: cp ../../go.sum . && GOPROXY=off GOSUMDB=off GOFLAGS=-mod=mod go mod tidy -e)",
				args[0], hostAgentExample, err, out, hostAgentExample)
		}
	}
	run := exec.CommandContext(ctx, bin)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	got, err := run.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", hostAgentExample, err, stderr.String())
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s printed (-output.txt +got):\n%s", hostAgentExample, diff)
	}
}

// offline is env for a go command that builds from the module cache alone
// and with the module's go.mod and go.sum as they are: no proxy, no
// checksum database, no workspace, and none of the caller's GOFLAGS (the
// podman build tags, -mod) but -mod=readonly; without cgo, as meshhost is
// built, so that no C toolchain is needed.
func offline(env []string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{"GOFLAGS", "GOPROXY", "GOSUMDB", "GOWORK", "GONOSUMDB", "GOPRIVATE", "CGO_ENABLED"}, k)
	})
	return append(env, "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "CGO_ENABLED=0")
}
