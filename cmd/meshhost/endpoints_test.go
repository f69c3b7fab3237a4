package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/resolver/handover"
)

// peerClientEnv makes the test binary a client of one endpoint
// (TestPeerClient) instead of running tests: "http-unix SOCKET METHOD
// PATH", "http-tcp ADDR METHOD PATH [TOKEN]" or "handover SOCKET". It
// prints "status N" for an HTTP answer, "took N" for a handover that
// handed sockets over, "error: ..." otherwise.
const peerClientEnv = "MESHHOST_TEST_PEER_CLIENT"

// TestPeerClient is the client of TestEndpointsRefuseOtherUsers, run as
// another user; it does nothing in a normal test run.
func TestPeerClient(t *testing.T) {
	spec := os.Getenv(peerClientEnv)
	if spec == "" {
		t.Skip("the client of TestEndpointsRefuseOtherUsers")
	}
	fmt.Println(peerRequest(strings.Fields(spec)))
}

func peerRequest(a []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a[0] == "handover" {
		s, files, err := handover.Take(ctx, a[1], "test")
		if err != nil {
			return "error: " + err.Error()
		}
		s.Abort()
		return fmt.Sprintf("took %d", len(files))
	}
	client, base := &http.Client{}, "http://"+a[1]
	if a[0] == "http-unix" {
		client.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", a[1])
		}}
		base = "http://meshhost"
	}
	var body io.Reader
	if a[2] == http.MethodPut {
		body = strings.NewReader(`{"schema": 1, "machine": "ace", "generation": 99, "roster": {"generation": 1, "zones": ["internal"], "names": {}}, "containers": [{"name": "evil", "image": "busybox", "mounts": [{"source": "/", "target": "/host"}], "cap_add": ["SYS_ADMIN"]}]}`)
	}
	req, err := http.NewRequestWithContext(ctx, a[2], base+a[3], body)
	if err != nil {
		return "error: " + err.Error()
	}
	if len(a) > 4 {
		req.Header.Set("Authorization", "Bearer "+a[4])
	}
	resp, err := client.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	resp.Body.Close()
	return fmt.Sprintf("status %d", resp.StatusCode)
}

// TestEndpointsRefuseOtherUsers runs one client, as uid 65534 (nobody),
// against every endpoint meshhost opens: the agent's push endpoint on a
// unix socket and on TCP, the resolver's control socket and its handover
// socket. The sockets' files are opened to everyone (chmod 0666, as a
// socket in a shared directory or a widened mode would be), so that what
// refuses is the endpoint's own check: SO_PEERCRED, or the token.
func TestEndpointsRefuseOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a client as uid 65534: needs root")
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // testing's own directory, then the test's
	os.Chmod(dir, 0o755)
	// The test binary, where uid 65534 may run it.
	bin := filepath.Join(dir, "client.test")
	if data, err := os.ReadFile(os.Args[0]); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	as := func(uid uint32, args ...string) string {
		cmd := exec.Command(bin, "-test.run=^TestPeerClient$", "-test.count=1")
		cmd.Env = append(os.Environ(), peerClientEnv+"="+strings.Join(args, " "))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "status ") || strings.HasPrefix(line, "took ") || strings.HasPrefix(line, "error: ") {
				return line
			}
		}
		return fmt.Sprintf("no answer (%v): %s", err, out)
	}

	token := "0123456789abcdef0123456789abcdef"
	tokenFile := filepath.Join(dir, "push.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	decl := filepath.Join(dir, "decl.json")
	writeAtomic(t, decl, `{"schema": 1, "machine": "ace", "generation": 1, "roster": {"generation": 1, "zones": ["internal"], "names": {}}, "containers": [{"name": "db", "image": "busybox", "env": {"POSTGRES_PASSWORD": "s3cr3t"}}]}`)
	agentArgs := func(name string, args ...string) []string {
		state := filepath.Join(dir, name)
		return append([]string{"--runtime", "memory", "--machine", "ace", "--state", state, "--declaration", decl,
			"--http", "off", "--probe-binary", "/nonexistent"}, args...)
	}
	unixPush := filepath.Join(dir, "unix-sock", "push.sock")
	os.MkdirAll(filepath.Dir(unixPush), 0o755)
	startAgent(t, "unix agent", agentArgs("unix", "--push", "unix:"+unixPush)...)
	allowedPush := filepath.Join(dir, "allowed-sock", "push.sock")
	os.MkdirAll(filepath.Dir(allowedPush), 0o755)
	startAgent(t, "allowing agent", agentArgs("allowed", "--push", "unix:"+allowedPush, "--push-allow-uid", "65534")...)
	tcpPush := dnstest.FreePort(t).String()
	startAgent(t, "tcp agent", agentArgs("tcp", "--push", tcpPush, "--push-token-file", tokenFile)...)

	roster := filepath.Join(dir, "roster.json")
	writeAtomic(t, roster, `{"generation": 1, "zones": ["internal"], "names": {}}`)
	control, hsock := filepath.Join(dir, "control.sock"), filepath.Join(dir, "handover.sock")
	stderr := &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		env := &environment{stdout: stderr, stderr: stderr, getenv: func(string) string { return "" }}
		done <- run(ctx, env, []string{"resolver", "--roster", roster, "--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9",
			"--state-dir", filepath.Join(dir, "resolver"), "--control", control, "--handover", hsock})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("resolver log:\n%s", stderr)
		}
	})
	for _, sock := range []string{unixPush, allowedPush, control, hsock} {
		// Made 0600 by its listener, not before the chmod below.
		waitUntil(t, sock+" is there", func() bool { fi, err := os.Stat(sock); return err == nil && fi.Mode().Perm() == 0o600 })
	}
	waitUntil(t, "the TCP push endpoint answers", func() bool {
		c, err := net.Dial("tcp", tcpPush)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	// As created, the socket's mode alone keeps others out.
	if got := as(65534, "http-unix", unixPush, "GET", "/v1/declaration"); !strings.HasPrefix(got, "error: ") || !strings.Contains(got, "permission denied") {
		t.Errorf("uid 65534 GET on the push socket as created (0600) = %q, want permission denied", got)
	}
	for _, sock := range []string{unixPush, allowedPush, control, hsock} {
		if err := os.Chmod(sock, 0o666); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name string
		uid  uint32
		args []string
		want string // a prefix of the answer; "hung up": refused by the endpoint, not by a file's mode
	}{
		{"unix push GET", 65534, []string{"http-unix", unixPush, "GET", "/v1/declaration"}, "hung up"},
		{"unix push PUT", 65534, []string{"http-unix", unixPush, "PUT", "/v1/declaration"}, "hung up"},
		{"unix push GET as root", 0, []string{"http-unix", unixPush, "GET", "/v1/declaration"}, "status 200"},
		{"unix push GET as an allowed uid", 65534, []string{"http-unix", allowedPush, "GET", "/v1/declaration"}, "status 200"},
		{"TCP push GET without a token", 65534, []string{"http-tcp", tcpPush, "GET", "/v1/declaration"}, "status 401"},
		{"TCP push PUT without a token", 65534, []string{"http-tcp", tcpPush, "PUT", "/v1/declaration"}, "status 401"},
		{"TCP push GET with another token", 65534, []string{"http-tcp", tcpPush, "GET", "/v1/declaration", "not-the-token-at-all"}, "status 403"},
		{"TCP push PUT with another token", 65534, []string{"http-tcp", tcpPush, "PUT", "/v1/declaration", "not-the-token-at-all"}, "status 403"},
		{"TCP push GET with the token", 65534, []string{"http-tcp", tcpPush, "GET", "/v1/declaration", token}, "status 200"},
		{"resolver control socket GET", 65534, []string{"http-unix", control, "GET", "/v1/status"}, "hung up"},
		{"resolver control socket PUT", 65534, []string{"http-unix", control, "PUT", "/v1/roster"}, "hung up"},
		{"resolver control socket GET as root", 0, []string{"http-unix", control, "GET", "/v1/status"}, "status 200"},
		{"handover socket", 65534, []string{"handover", hsock}, "hung up"},
		{"handover socket as root", 0, []string{"handover", hsock}, "took "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := as(tc.uid, tc.args...)
			t.Logf("uid %d: %s", tc.uid, got)
			ok := strings.HasPrefix(got, tc.want)
			if tc.want == "hung up" {
				ok = strings.HasPrefix(got, "error: ") && !strings.Contains(got, "permission denied")
			}
			if !ok {
				t.Errorf("uid %d: %s = %q, want %q...", tc.uid, strings.Join(tc.args, " "), got, tc.want)
			}
		})
	}
}

// TestAgentRefusesAnOpenEndpoint: a TCP push endpoint without a token, a
// token file others may read or of another owner, and an --http address
// off loopback without --http-remote each stop the agent at its start,
// with the flag and the fix named.
func TestAgentRefusesAnOpenEndpoint(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.token")
	os.WriteFile(good, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	readable := filepath.Join(dir, "readable.token")
	os.WriteFile(readable, []byte("0123456789abcdef0123456789abcdef\n"), 0o644)
	short := filepath.Join(dir, "short.token")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"TCP push without a token", []string{"--push", "127.0.0.1:0"}, "--push-token-file"},
		{"TCP push, token readable by others", []string{"--push", "127.0.0.1:0", "--push-token-file", readable}, "chmod 600"},
		{"TCP push, token too short", []string{"--push", "127.0.0.1:0", "--push-token-file", short}, "at least 16"},
		{"TCP push, no token file", []string{"--push", "127.0.0.1:0", "--push-token-file", filepath.Join(dir, "none")}, "no such file"},
		{"unix push with a token", []string{"--push", "unix:" + filepath.Join(dir, "p.sock"), "--push-token-file", good}, "for a TCP --push"},
		{"TCP push with allowed uids", []string{"--push", "127.0.0.1:0", "--push-token-file", good, "--push-allow-uid", "1000"}, "for a unix socket"},
		{"--http on every address", []string{"--push", "off", "--http", "0.0.0.0:0"}, "--http-remote"},
		{"--http on a routable address", []string{"--push", "off", "--http", "10.1.2.3:9469"}, "--http-remote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"agent", "--runtime", "memory", "--state", filepath.Join(dir, "state"), "--http", "off"}, tc.args...)
			code, _, stderr := runCLI(t, nil, args...)
			if code != exitConfig || !strings.Contains(stderr, tc.want) {
				t.Errorf("meshhost %s = exit %d, %q; want exit %d naming %q", strings.Join(args, " "), code, stderr, exitConfig, tc.want)
			}
		})
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(good, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCLI(t, nil, "agent", "--runtime", "memory", "--state", filepath.Join(dir, "state"), "--http", "off", "--push", "127.0.0.1:0", "--push-token-file", good)
		if code != exitConfig || !strings.Contains(stderr, "chown root") {
			t.Errorf("a token file owned by uid 65534: exit %d, %q; want a refusal naming chown", code, stderr)
		}
	}
}

// TestStateFilesOwnerOnly walks the state directories after an agent and
// a resolver ran, and a rollback and a migration pause wrote theirs: no
// file, directory or socket there lets its group or others read it.
func TestStateFilesOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	state, rstate := filepath.Join(dir, "state"), filepath.Join(dir, "resolver")
	decl := filepath.Join(dir, "decl.json")
	doc := func(gen int, image string) string {
		return fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "auto", "roster": {"generation": %d, "zones": ["internal"], "names": {"db.ace.internal": ["10.89.0.7"]}}, "containers": [{"name": "db", "image": %q, "env": {"POSTGRES_PASSWORD": "s3cr3t"}}]}`, gen, gen, image)
	}
	writeAtomic(t, decl, doc(1, "busybox"))
	a := startAgent(t, "agent", "--runtime", "memory", "--machine", "ace", "--state", state, "--declaration", decl,
		"--http", "off", "--probe-binary", "/nonexistent", "--interval", "1s")
	waitUntil(t, "declaration 1 is saved", func() bool { _, err := os.Stat(filepath.Join(state, "declaration.json")); return err == nil })
	writeAtomic(t, decl, doc(2, "busybox:2"))
	waitUntil(t, "declaration 2 is applied", func() bool {
		return strings.Contains(a.logs.String(), `msg="declaration applied" component=agent declaration_generation=2`)
	})
	if code, out, stderr := runCLI(t, nil, "migrate", "pause", "--state", state); code != 0 {
		t.Logf("meshhost migrate pause = %d %s %s", code, out, stderr)
	}
	if code, out, stderr := runCLI(t, nil, "rollback", "1", "--state", state); code != 0 {
		t.Fatalf("meshhost rollback 1 = %d %s %s", code, out, stderr)
	}
	waitUntil(t, "the rollback is applied", func() bool { return strings.Contains(a.logs.String(), `declaration_generation=3`) })
	a.stop(t)

	roster := filepath.Join(dir, "roster.json")
	writeAtomic(t, roster, `{"generation": 1, "zones": ["internal"], "names": {}}`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &syncbuf.Buffer{}
	go func() {
		env := &environment{stdout: logs, stderr: logs, getenv: func(string) string { return "" }}
		done <- run(ctx, env, []string{"resolver", "--roster", roster, "--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9",
			"--state-dir", rstate, "--control", filepath.Join(rstate, "control.sock"), "--handover", filepath.Join(rstate, "handover.sock")})
	}()
	c := func() bool { _, err := os.Stat(filepath.Join(rstate, "roster.json")); return err == nil }
	waitUntil(t, "the resolver saves its roster", c)
	cancel()
	<-done

	var seen []string
	for _, root := range []string{state, rstate} {
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				t.Error(err)
				return nil
			}
			fi, err := os.Lstat(path)
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(dir, path)
			seen = append(seen, fmt.Sprintf("%s %v", rel, fi.Mode()))
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s has mode %v: its group or others may read it", rel, fi.Mode())
			}
			return nil
		})
	}
	t.Logf("files:\n%s", strings.Join(seen, "\n"))
	if len(seen) < 6 {
		t.Errorf("only %d files walked; want the agent's and the resolver's state", len(seen))
	}
}
