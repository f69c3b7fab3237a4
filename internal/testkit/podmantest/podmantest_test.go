package podmantest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestPrefixIsAValidName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,200}$`)
	for _, name := range []string{"TestX", "TestCreate/copy_mode#01", strings.Repeat("TestVeryLong/", 10), "Test___"} {
		p := prefix(name)
		if !valid.MatchString(p+"x") || !strings.HasPrefix(p, "mht-") || len(p) > 40 {
			t.Errorf("prefix(%q) = %q, want a short valid container name start", name, p)
		}
		if prefix(name) == p {
			t.Errorf("prefix(%q) twice = %q both times, want unique", name, p)
		}
	}
}

func TestCleanupRemovesWhatATestMade(t *testing.T) {
	Socket(t)
	var h *Harness
	t.Run("make", func(t *testing.T) {
		h = New(t)
		h.MustPodman("create", "--name", h.Name("c1"), Image, "true")
		h.MustPodman("create", "--label", Label+"="+h.Prefix(), Image, "true") // unnamed, labelled
		h.MustPodman("volume", "create", h.Name("vol"))
		h.Network("net", "--ipv6")
		if ids, err := h.Containers(); err != nil || len(ids) != 2 {
			t.Fatalf("Containers() = %v, %v; want 2", ids, err)
		}
	})
	if h == nil {
		return // the subtest failed before making anything
	}
	if ids, err := h.Containers(); err != nil || len(ids) != 0 {
		t.Errorf("after the test, its containers = %v, %v; want none", ids, err)
	}
	for _, kind := range []string{"volume", "network"} {
		out, err := h.Podman(kind, "ls", "--format", "{{.Name}}")
		if err != nil {
			t.Fatal(err)
		}
		if left := h.mine(out); len(left) > 0 {
			t.Errorf("after the test, its %ss = %v; want none", kind, left)
		}
	}
}

// TestSocketWithoutTheVariable runs this test binary again without
// MESHHOST_PODMAN_SOCKET: by hand the podman tests skip and say how to enable
// them; under CI=true they fail.
func TestSocketWithoutTheVariable(t *testing.T) {
	if os.Getenv("PODMANTEST_CHILD") == "1" {
		Socket(t)
		t.Log("Socket returned")
		return
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"", false, "--- SKIP"},
		{"true", true, "--- FAIL"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSocketWithoutTheVariable$", "-test.v")
		cmd.Env = append(os.Environ(), "PODMANTEST_CHILD=1", EnvSocket+"=", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail || !strings.Contains(string(out), tc.want) ||
			!strings.Contains(string(out), `eval "$(scripts/podman-up)"`) || strings.Contains(string(out), "Socket returned") {
			t.Errorf("CI=%q, no %s: exit error %v, output:\n%s\nwant %s with how to enable the tests", tc.ci, EnvSocket, err, out, tc.want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    PodmanVersion
		wantErr bool
	}{
		{"4.3.1", PodmanVersion{4, 3, 1}, false},
		{"5.4.2\n", PodmanVersion{5, 4, 2}, false},
		{"5.6.0-dev", PodmanVersion{5, 6, 0}, false},
		{"5.4", PodmanVersion{}, true},
		{"", PodmanVersion{}, true},
	} {
		got, err := ParseVersion(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	if v := (PodmanVersion{4, 3, 1}); !v.AtLeast(4, 3) || v.AtLeast(4, 4) || !v.AtLeast(3, 9) || v.AtLeast(5, 0) {
		t.Errorf("AtLeast of %v is wrong", v)
	}
}

func TestInterfaceName(t *testing.T) {
	p := prefix("TestSomethingRatherLongIndeed/sub")
	rnd := strings.Split(strings.TrimSuffix(p, "-"), "-")
	want := "mh" + rnd[len(rnd)-1] + "12"
	if got := InterfaceName(p, 12); got != want || len(got) > 15 {
		t.Errorf("InterfaceName(%q, 12) = %q, want %q (at most 15 characters)", p, got, want)
	}
}

// TestRecord runs this test binary again with MESHHOST_PODMAN_TESTLOG set:
// a test that asks for the service is recorded with its package and
// top-level name, once per call, and a test that does not is not.
func TestRecord(t *testing.T) {
	if os.Getenv("PODMANTEST_CHILD") == "1" {
		t.Run("sub", func(t *testing.T) { Socket(t) })
		return
	}
	log := filepath.Join(t.TempDir(), "tests")
	cmd := exec.Command(os.Args[0], "-test.run=^(TestRecord|TestPrefixIsAValidName)$", "-test.v")
	cmd.Env = append(os.Environ(), "PODMANTEST_CHILD=1", EnvSocket+"=unix:///nonexistent", EnvTestLog+"="+log, "CI=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/meshhost/meshhost/internal/testkit/podmantest\tTestRecord\n"; string(got) != want {
		t.Errorf("%s = %q, want %q", EnvTestLog, got, want)
	}
}
