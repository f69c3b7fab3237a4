package resolver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// needPodman returns the podman CLI and the arguments that point it at the
// project's podman service, skipping without one (failing under CI=true).
func needPodman(t *testing.T) (string, []string, []string) {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	sock := os.Getenv("MESHHOST_PODMAN_SOCKET")
	if sock == "" {
		fail("MESHHOST_PODMAN_SOCKET is unset; run scripts/podman-up and export what it prints")
		return "", nil, nil
	}
	bin, err := exec.LookPath("podman")
	if err != nil {
		fail("podman CLI not found: %v", err)
		return "", nil, nil
	}
	env := os.Environ()
	if os.Getenv("CONTAINERS_CONF") == "" {
		conf := filepath.Join(filepath.Dir(strings.TrimPrefix(sock, "unix://")), "containers.conf")
		if _, err := os.Stat(conf); err == nil {
			env = append(env, "CONTAINERS_CONF="+conf)
		}
	}
	return bin, []string{"--remote", "--url", sock}, env
}

// TestPodmanContainer resolves a mesh name from inside a real container on
// podman's default network (which has no DNS of its own), through a listener
// on the bridge gateway bound before the bridge exists (IP_FREEBIND).
func TestPodmanContainer(t *testing.T) {
	bin, global, env := needPodman(t)
	const image = "localhost/meshhost-busybox:latest"
	gateway := netip.MustParseAddrPort("10.88.0.1:53")

	r := &spec.Roster{Generation: 1, Zones: []string{"mesh.internal"}, Names: map[string][]netip.Addr{
		"svc.mesh.internal": {netip.MustParseAddr("10.77.0.5")},
	}}
	s, err := New(safeConfig(t, Config{
		Allow:     []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")},
		Forbidden: PodmanDNSGuard(),
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(r); err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(gateway); err != nil {
		t.Fatalf("Listen(%s): %v (is port 53 on the podman gateway taken?)", gateway, err)
	}

	var nonce [4]byte
	rand.Read(nonce[:])
	name := "meshhost-resolver-test-" + hex.EncodeToString(nonce[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(global, "rm", "-f", "--ignore", name)...)
		cmd.Env = env
		cmd.Run()
	})
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		full := append(append([]string{}, global...), "run", "--rm", "--name", name, "--dns", gateway.Addr().String(), image)
		cmd := exec.CommandContext(ctx, bin, append(full, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(append(full, args...), " "), err, out)
		}
		return string(out)
	}
	out := run("nslookup", "svc.mesh.internal")
	if !strings.Contains(out, "10.77.0.5") {
		t.Errorf("nslookup svc.mesh.internal in a container:\n%s\nwant address 10.77.0.5", out)
	}
	// A name the roster does not have does not exist (and was not forwarded:
	// the server has no upstream).
	rand.Read(nonce[:])
	name = "meshhost-resolver-test-" + hex.EncodeToString(nonce[:])
	out = run("sh", "-c", "nslookup nope.mesh.internal; echo exit=$?")
	if !strings.Contains(out, "NXDOMAIN") && !strings.Contains(out, "can't find") {
		t.Errorf("nslookup nope.mesh.internal in a container:\n%s\nwant NXDOMAIN", out)
	}
}
