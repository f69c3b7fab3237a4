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

	"github.com/meshhost/meshhost/internal/testkit/podmantest"
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
	sock := podmantest.Socket(t) // skips, or fails under CI=true, without a service
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
// a podman network without DNS of its own (like podman's default network),
// through a listener on the bridge gateway bound before the bridge exists
// (IP_FREEBIND). The test makes its own network, so that it does not contend
// for 10.88.0.1:53 with other packages' tests.
func TestPodmanContainer(t *testing.T) {
	bin, global, env := needPodman(t)
	// Agents in other packages' tests probe every network on the machine
	// and bind gateways' port 53: take the machine-wide lock they take.
	podmantest.Exclusive(t)
	const image = "localhost/meshhost-busybox:latest"
	podman := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(append([]string{}, global...), args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	var nonce [4]byte
	rand.Read(nonce[:])
	suffix := hex.EncodeToString(nonce[:])
	network := "meshhost-resolver-test-" + suffix
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 214, nonce[0], 0}), 24)
	gwAddr := netip.AddrFrom4([4]byte{10, 214, nonce[0], 1})
	gateway := netip.AddrPortFrom(gwAddr, 53)
	create := []string{"network", "create", "--disable-dns", "--subnet", subnet.String(), "--gateway", gwAddr.String()}
	if podmantest.Version(t).Major >= 5 {
		// A bridge of its own: podman 4.3 beside it names its bridges podman<N> too.
		create = append(create, "--interface-name", "mhr"+suffix)
	}
	if out, err := podman(60*time.Second, append(create, network)...); err != nil {
		t.Fatalf("podman network create: %v\n%s", err, out)
	}
	t.Cleanup(func() { podman(60*time.Second, "network", "rm", "-f", network) })

	r := &spec.Roster{Generation: 1, Zones: []string{"mesh.internal"}, Names: map[string][]netip.Addr{
		"svc.mesh.internal": {netip.MustParseAddr("10.77.0.5")},
	}}
	s, err := New(safeConfig(t, Config{
		Allow:     []netip.Prefix{subnet},
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

	name := network
	t.Cleanup(func() { podman(30*time.Second, "rm", "-f", "--ignore", name) })
	run := func(args ...string) string {
		t.Helper()
		full := append([]string{"run", "--rm", "--name", name, "--network", network, "--dns", gwAddr.String(), image}, args...)
		out, err := podman(90*time.Second, full...)
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(full, " "), err, out)
		}
		return out
	}
	out := run("nslookup", "svc.mesh.internal")
	t.Logf("nslookup svc.mesh.internal in a container on %s:\n%s", network, out)
	if !strings.Contains(out, "10.77.0.5") {
		t.Errorf("nslookup svc.mesh.internal in a container:\n%s\nwant address 10.77.0.5", out)
	}
	// A name the roster does not have does not exist (and was not forwarded:
	// the server has no upstream).
	out = run("sh", "-c", "nslookup nope.mesh.internal; echo exit=$?")
	if !strings.Contains(out, "NXDOMAIN") && !strings.Contains(out, "can't find") {
		t.Errorf("nslookup nope.mesh.internal in a container:\n%s\nwant NXDOMAIN", out)
	}
}
