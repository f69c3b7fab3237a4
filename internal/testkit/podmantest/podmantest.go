// Package podmantest runs tests against a real podman service: it finds the
// service, names what a test makes so that nothing collides, and removes it
// all when the test ends.
//
// The tests find the service through one environment variable,
// MESHHOST_PODMAN_SOCKET (e.g. unix:///repo/.run/podman.sock), which
// `eval "$(scripts/podman-up)"` (podman 4.3, the host's) or
// `eval "$(scripts/podman-up --podman 5)"` and `make test` set. Without it
// the podman tests skip, except under CI=true, where they fail. A test whose
// expectations differ between podman versions asks Version which one it
// talks to.
//
// With MESHHOST_PODMAN_TESTLOG set to a file, every test that asks for the
// service (Socket) appends its package and top-level test name to it, so
// that `make test` can run exactly the tests that talk to podman against a
// second service.
//
// It drives podman through its command line (podman --url SOCKET ...), not
// the Go bindings, so that reconcile/podman stays the only package importing
// them.
package podmantest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvSocket names the environment variable that points the tests at the
// podman service.
const EnvSocket = "MESHHOST_PODMAN_SOCKET"

// Image is the test image scripts/podman-up imports: busybox with sh, sleep,
// cat, nslookup, ls, echo, true, false, kill, ping, wget and hostname.
const Image = "localhost/meshhost-busybox:latest"

// Label marks everything a test makes, with the test's unique prefix as its
// value. It sits under meshhost's own label prefix, so it never enters a
// digest.
const Label = "io.meshhost.test"

// EnvTestLog names the environment variable that makes Socket record the
// tests that talk to podman (see the package doc).
const EnvTestLog = "MESHHOST_PODMAN_TESTLOG"

// Socket returns the podman service socket URI the tests use. Without
// MESHHOST_PODMAN_SOCKET it skips the test, or fails it when CI=true.
func Socket(t testing.TB) string {
	t.Helper()
	if s := os.Getenv(EnvSocket); s != "" {
		record(t)
		return s
	}
	msg := EnvSocket + ` is not set, so the tests against real podman cannot run; ` +
		`run them with: eval "$(scripts/podman-up)" (as root on Debian it installs podman and starts its service), or make test`
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// record appends the test's package and top-level name to the file named
// by MESHHOST_PODMAN_TESTLOG, when set: one write of one line, which
// O_APPEND keeps whole when tests of a package run in parallel.
func record(t testing.TB) {
	path := os.Getenv(EnvTestLog)
	if path == "" {
		return
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatalf("podmantest: %s is set, but the test binary has no build info to name its package", EnvTestLog)
	}
	pkg := strings.TrimSuffix(bi.Path, ".test") // a test binary's path is the package's, plus ".test"
	top, _, _ := strings.Cut(t.Name(), "/")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.WriteString(pkg + "\t" + top + "\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatalf("podmantest: recording the test in %s: %v", path, err)
	}
}

// PodmanVersion is a podman version, e.g. 5.4.2.
type PodmanVersion struct {
	Major, Minor, Patch int
}

func (v PodmanVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is major.minor or later.
func (v PodmanVersion) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)`)

// ParseVersion parses "5.4.2" (a suffix after the patch number, such as
// "-dev", is ignored).
func ParseVersion(s string) (PodmanVersion, error) {
	m := versionRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return PodmanVersion{}, fmt.Errorf("podman version %q is not MAJOR.MINOR.PATCH", s)
	}
	var v PodmanVersion
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	return v, nil
}

// versions caches each service's version, by socket.
var versions sync.Map // socket -> PodmanVersion

// Version returns the version of the podman service the tests talk to
// (skipping or failing t as Socket does without one). It fails t when the
// podman CLI on PATH is older than the service: the 4.3 client breaks on
// `podman events` against a 5.x service (`eval "$(scripts/podman-up
// --podman 5)"` puts a 5.x client first on PATH).
func Version(t testing.TB) PodmanVersion {
	t.Helper()
	socket := Socket(t)
	if v, ok := versions.Load(socket); ok {
		return v.(PodmanVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", "--url", socket, "version", "--format", "{{.Client.Version}} {{.Server.Version}}").Output()
	if err != nil {
		t.Fatalf("podmantest: asking the podman service at %s its version: %v", socket, err)
	}
	client, server, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	v, err := ParseVersion(server)
	if err != nil {
		t.Fatalf("podmantest: %v", err)
	}
	c, err := ParseVersion(client)
	if err != nil {
		t.Fatalf("podmantest: the podman CLI: %v", err)
	}
	if c.Major < v.Major {
		t.Fatalf("podmantest: the podman CLI on PATH is %s, older than the service at %s (%s), and breaks on some commands (events); "+
			`put a %d.x client first on PATH (eval "$(scripts/podman-up --podman %d)" does)`, c, socket, v, v.Major, v.Major)
	}
	versions.Store(socket, v)
	return v
}

// Harness is one test's view of podman: a unique prefix for the names it
// makes and a cleanup that removes them.
type Harness struct {
	t      testing.TB
	socket string
	prefix string
	*made
}

// made is what a test made that only cleanup knows: shared by a Harness and
// its Sub copies.
type made struct {
	// mu guards the fields below.
	mu       sync.Mutex
	networks int // networks made, for their interface names
}

// New returns a Harness for t (skipping t when there is no podman service, see
// Socket), and registers a cleanup that removes every container, network,
// and volume the test made: containers labelled Label=Prefix() or named
// Prefix()..., networks and volumes named Prefix().... The first New of a test process also removes what test runs
// that died before their cleanup left, once it is older than two hours.
func New(t testing.TB) *Harness {
	t.Helper()
	h := &Harness{t: t, socket: Socket(t), prefix: prefix(t.Name()), made: &made{}}
	// A cheap call (`podman version` takes a second): does the service answer?
	if _, err := h.Podman("ps", "-q", "--last", "1"); err != nil {
		t.Fatalf("the podman service at %s (%s) does not answer: %v", h.socket, EnvSocket, err)
	}
	Version(t) // and the CLI fits it
	sweepOnce.Do(func() { h.sweep() })
	t.Cleanup(h.cleanup)
	return h
}

// staleAfter is the age after which what a test made is a leftover of a run
// that died before its cleanup (a panic, a timeout, ^C): longer than any
// test run (make test allows 40 minutes).
const staleAfter = "2h"

var sweepOnce sync.Once

// sweep removes the leftovers of test runs that died before their cleanup:
// test containers, volumes and networks older than staleAfter. Once per test
// process; what it cannot remove it only logs.
func (h *Harness) sweep() {
	var ids []string
	for _, filter := range []string{"label=" + Label, "name=^mht-"} {
		out, err := h.Podman("ps", "-a", "-q", "--no-trunc", "--filter", filter, "--filter", "until="+staleAfter)
		if err != nil {
			h.t.Logf("podmantest: looking for stale test containers: %v", err)
			return
		}
		ids = append(ids, strings.Fields(out)...)
	}
	if len(ids) > 0 {
		h.t.Logf("podmantest: removing %d test containers older than %s", len(ids), staleAfter)
		if err := h.removeContainers(ids); err != nil {
			h.t.Logf("podmantest: %v", err)
		}
	}
	for _, kind := range []string{"network", "volume"} {
		out, err := h.Podman(kind, "ls", "-q", "--filter", "until="+staleAfter)
		if err != nil {
			h.t.Logf("podmantest: looking for stale test %ss: %v", kind, err)
			continue
		}
		var stale []string
		for _, n := range strings.Fields(out) {
			if strings.HasPrefix(n, "mht-") {
				stale = append(stale, n)
			}
		}
		if len(stale) > 0 {
			h.t.Logf("podmantest: removing %d test %ss older than %s", len(stale), kind, staleAfter)
			if _, err := h.Podman(append([]string{kind, "rm"}, stale...)...); err != nil {
				h.t.Logf("podmantest: %v", err)
			}
		}
	}
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// prefix is "mht-<test name, shortened>-<random>-": unique per test run, a
// valid container, network and volume name start, and readable in `podman ps`.
func prefix(test string) string {
	name := strings.Trim(nonName.ReplaceAllString(strings.ToLower(test), "-"), "-")
	if len(name) > 24 {
		name = name[len(name)-24:]
		name = strings.TrimLeft(name, "-")
	}
	var b [3]byte
	rand.Read(b[:])
	return "mht-" + name + "-" + hex.EncodeToString(b[:]) + "-"
}

// Sub returns h for t, a subtest (parallel or not) of h's test: the same
// prefix and cleanup, with failures reported to t.
func (h *Harness) Sub(t testing.TB) *Harness {
	sub := *h
	sub.t = t
	return &sub
}

// Socket returns the podman service socket URI.
func (h *Harness) Socket() string { return h.socket }

// Prefix returns the test's unique name prefix, e.g. "mht-testcreate-3fa9c1-".
func (h *Harness) Prefix() string { return h.prefix }

// Name returns the test's prefix followed by s: a name no other test uses.
func (h *Harness) Name(s string) string { return h.prefix + s }

// Labels returns the label that marks a container as this test's, to add to
// what a test creates.
func (h *Harness) Labels() map[string]string { return map[string]string{Label: h.prefix} }

// Podman runs the podman command line against the service and returns its
// standard output, trimmed. The error carries standard error.
func (h *Harness) Podman(args ...string) (string, error) {
	return h.PodmanContext(context.Background(), args...)
}

// PodmanContext is Podman with a context; it never takes more than two
// minutes.
func (h *Harness) PodmanContext(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", append([]string{"--url", h.socket}, args...)...)
	cmd.Env = os.Environ() // CONTAINERS_CONF, when scripts/podman-up's export is set, applies
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return strings.TrimSpace(stdout.String()), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// MustPodman is Podman, failing the test on an error.
func (h *Harness) MustPodman(args ...string) string {
	h.t.Helper()
	out, err := h.Podman(args...)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// Exec runs argv in a running container and returns its standard output
// (untrimmed: tests compare files byte for byte), failing the test on an
// error.
func (h *Harness) Exec(container string, argv ...string) string {
	h.t.Helper()
	cmd := exec.Command("podman", append([]string{"--url", h.socket, "exec", container}, argv...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		h.t.Fatalf("podman exec %s %s: %v: %s", container, strings.Join(argv, " "), err, stderr.String())
	}
	return stdout.String()
}

// Network creates a bridge network named Name(name), passing options to
// `podman network create` (e.g. "--ipv6", "--subnet", "10.99.1.0/24",
// "--disable-dns"), and returns its name. Without --subnet podman picks free
// subnets, so tests running at once never collide. Cleanup removes it.
//
// On podman 5 the network's bridge gets a name of its own (InterfaceName):
// both the host's podman 4.3 and a podman 5 beside it name new bridges
// podman<N>, and two networks on one bridge would mix their traffic.
// Podman 4.3 cannot name a bridge, and is alone in naming them podman<N>.
func (h *Harness) Network(name string, options ...string) string {
	h.t.Helper()
	name = h.Name(name)
	args := append([]string{"network", "create", "--label", Label + "=" + h.prefix}, options...)
	if Version(h.t).Major >= 5 && !slices.Contains(options, "--interface-name") {
		h.mu.Lock()
		h.networks++
		n := h.networks
		h.mu.Unlock()
		args = append(args, "--interface-name", InterfaceName(h.prefix, n))
	}
	h.MustPodman(append(args, name)...)
	return name
}

// InterfaceName returns the n-th bridge name for networks of a test with
// prefix: "mh", the prefix's random part and n, short enough for Linux's
// 15 characters.
func InterfaceName(prefix string, n int) string {
	rnd := strings.TrimSuffix(prefix, "-")
	rnd = rnd[strings.LastIndex(rnd, "-")+1:]
	return fmt.Sprintf("mh%s%d", rnd, n)
}

// Containers returns the IDs of the test's containers: labelled with its
// prefix or named with it.
func (h *Harness) Containers() ([]string, error) {
	byLabel, err := h.Podman("ps", "-a", "-q", "--no-trunc", "--filter", "label="+Label+"="+h.prefix)
	if err != nil {
		return nil, err
	}
	byName, err := h.Podman("ps", "-a", "-q", "--no-trunc", "--filter", "name=^"+regexp.QuoteMeta(h.prefix))
	if err != nil {
		return nil, err
	}
	ids := append(strings.Fields(byLabel), strings.Fields(byName)...)
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// cleanup removes everything the test made. It reports what it could not
// remove as a test error, since a leftover breaks the next run's counts.
func (h *Harness) cleanup() {
	h.t.Helper()
	ids, err := h.Containers()
	if err != nil {
		h.t.Errorf("cleanup: listing containers: %v", err)
	}
	if len(ids) > 0 {
		if err := h.removeContainers(ids); err != nil {
			h.t.Errorf("cleanup: %v", err)
		}
	}
	nets, err := h.Podman("network", "ls", "--format", "{{.Name}}")
	if err != nil {
		h.t.Errorf("cleanup: listing networks: %v", err)
	}
	if names := h.mine(nets); len(names) > 0 {
		if _, err := h.Podman(append([]string{"network", "rm", "-f"}, names...)...); err != nil {
			h.t.Errorf("cleanup: %v", err)
		}
	}
	vols, err := h.Podman("volume", "ls", "-q")
	if err != nil {
		h.t.Errorf("cleanup: listing volumes: %v", err)
	}
	mine := h.mine(vols)
	if len(mine) > 0 {
		if _, err := h.Podman(append([]string{"volume", "rm", "-f"}, mine...)...); err != nil {
			h.t.Errorf("cleanup: %v", err)
		}
	}
}

// removeContainers removes the containers ids by force (never their named
// volumes). The command line refuses every one of them when it cannot
// inspect one: podman 5's client inspects each first, and a container whose
// removal was cut short (its API service killed in the middle of it) stays
// "removing" with its storage half gone, which neither 4.3 nor 5 inspects.
// The API's remove still removes it, so what the command line left is
// removed through the API, one by one.
func (h *Harness) removeContainers(ids []string) error {
	_, err := h.Podman(append([]string{"rm", "-f", "-t", "0", "--ignore"}, ids...)...)
	if err == nil {
		return nil
	}
	var errs []error
	for _, id := range ids {
		if err := h.removeByAPI(id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; through the API: %w", err, errors.Join(errs...))
	}
	return nil
}

// removeByAPI removes container id by force through the API's DELETE; a
// container already gone is not an error.
func (h *Harness) removeByAPI(id string) error {
	path, ok := strings.CutPrefix(h.socket, "unix://")
	if !ok {
		return fmt.Errorf("removing container %s: socket %s is not unix://", id, h.socket)
	}
	c := http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequest(http.MethodDelete, "http://d/v4.0.0/libpod/containers/"+url.PathEscape(id)+"?force=true&t=0", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("removing container %s: %w", id, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("removing container %s: %s: %s", id, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// mine returns the names in a list (one a line) that start with the prefix.
func (h *Harness) mine(list string) []string {
	var out []string
	for _, n := range strings.Fields(list) {
		if strings.HasPrefix(n, h.prefix) {
			out = append(out, n)
		}
	}
	return out
}
