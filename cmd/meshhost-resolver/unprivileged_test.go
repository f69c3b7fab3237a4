package main

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/continuity"
	"github.com/meshhost/meshhost/internal/testkit/fakesystemd"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
)

// nobody is the user the resolver runs as here, standing in for the
// user systemd allocates it (DynamicUser=yes in meshhost-resolver.service).
const nobody = 65534

// asResolverUser is how meshhost-resolver.service runs the resolver: a
// user of its own, no capability but CAP_NET_BIND_SERVICE (port 53),
// none to gain.
var asResolverUser = []string{
	fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups",
	"--inh-caps=-all,+net_bind_service", "--ambient-caps=+net_bind_service",
	"--bounding-set=-all,+net_bind_service", "--",
}

// TestUnprivileged runs the resolver as its unit does since it has a user
// of its own, through the upgrade from a resolver run as root: the old
// process serves port 53 of a loopback address and saves a roster; then,
// as systemd does on that upgrade, the state and runtime directories are
// handed to the new user, and the new process, with the sockets from
// systemd's store, serves the saved roster, and the agent (root without
// CAP_DAC_OVERRIDE, as its unit runs it) feeds it over the control socket
// the old process made; then a start from nothing (a reboot) binds port 53
// and the control socket afresh, with only CAP_NET_BIND_SERVICE.
func TestUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs the resolver as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv is missing (util-linux)")
	}
	bin := buildResolver(t, "v1")
	// The test's directories are root's 0700 ones: the resolver's user
	// must reach its binary, its directories and the notify socket.
	reach := func(paths ...string) {
		for _, p := range paths {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	reach(filepath.Dir(bin))
	base := t.TempDir()
	reach(filepath.Dir(base), base)
	state, run := filepath.Join(base, "state"), filepath.Join(base, "run")
	os.Mkdir(state, 0o700)
	os.Mkdir(run, 0o755)
	resolvConf := filepath.Join(base, "resolv.conf")
	os.WriteFile(resolvConf, nil, 0o644) // no upstream: nothing leaves the machine
	addr := freeLoopback53(t)
	args := []string{
		"--state-dir", state, "--control", filepath.Join(run, "resolver.sock"),
		"--handover", filepath.Join(run, "resolver-handover.sock"),
		"--listen", addr.String(), "--resolv-conf", resolvConf,
	}
	newArgs := append([]string{"--control-mode", "0666"}, args...) // the unit's
	sd := fakesystemd.New(t)
	start := func(asUser bool, args []string) *proc {
		t.Helper()
		var cmd *exec.Cmd
		if asUser {
			cmd = sd.Command(setpriv, nil, append(append([]string{}, asResolverUser...), append([]string{bin}, args...)...)...)
		} else {
			cmd = sd.Command(bin, nil, args...)
		}
		for _, kv := range cmd.Env {
			if p, ok := strings.CutPrefix(kv, "NOTIFY_SOCKET="); ok {
				reach(filepath.Dir(filepath.Dir(p)), filepath.Dir(p))
				os.Chmod(p, 0o666)
			}
		}
		n := len(sd.Messages())
		p := startProc(t, cmd)
		sd.Wait(n, "READY=1", 30*time.Second)
		return p
	}
	stop := func(p *proc) {
		t.Helper()
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.waitExit(t, 30*time.Second)
	}
	lookup := func(what string, want netip.Addr) {
		t.Helper()
		if err := continuity.UDP(addr, "gitea.novox.internal", want)(t.Context()); err != nil {
			t.Errorf("%s: lookup at %s: %v", what, addr, err)
		}
	}
	roster := func(gen uint64, a string) *spec.Roster {
		r := meshRoster(gen)
		r.Names["gitea.novox.internal"] = []netip.Addr{netip.MustParseAddr(a)}
		return r
	}
	ctl := control.NewClient(control.ClientConfig{Path: filepath.Join(run, "resolver.sock")})

	// The resolver before the upgrade: root, as its old unit ran it.
	p := start(false, args)
	if err := ctl.Update(roster(1, "10.89.0.1")); err != nil {
		t.Fatal(err)
	}
	lookup("root, generation 1", netip.MustParseAddr("10.89.0.1"))
	waitStored(t, sd, []string{"control", "dns-tcp-" + fileAddr(addr), "dns-udp-" + fileAddr(addr), "handover"})
	stop(p)

	// The upgrade: systemd moves the state directory to the new user
	// (StateDirectory= with DynamicUser=) and the runtime directory
	// (RuntimeDirectory=), each recursively, before it starts the new
	// process with the sockets it stored.
	chownTree(t, state, nobody)
	chownTree(t, run, nobody)
	p = start(true, newArgs)
	checkUser(t, p.cmd.Process.Pid)
	lookup("its own user, the saved generation 1 after the upgrade", netip.MustParseAddr("10.89.0.1"))
	if err := agentUpdate(t, setpriv, filepath.Join(run, "resolver.sock"), roster(2, "10.89.0.2")); err != nil {
		t.Errorf("the agent (root without CAP_DAC_OVERRIDE) feeding the resolver after the upgrade: %v", err)
	}
	lookup("its own user, generation 2 from the agent", netip.MustParseAddr("10.89.0.2"))
	stop(p)

	// A reboot: nothing kept but the state directory; port 53 and the
	// control socket are bound afresh, with CAP_NET_BIND_SERVICE alone.
	sd.Clear()
	os.Remove(filepath.Join(run, "resolver.sock"))
	os.Remove(filepath.Join(run, "resolver-handover.sock"))
	p = start(true, newArgs)
	checkUser(t, p.cmd.Process.Pid)
	lookup("its own user, from nothing but its state directory", netip.MustParseAddr("10.89.0.2"))
	if err := agentUpdate(t, setpriv, filepath.Join(run, "resolver.sock"), roster(3, "10.89.0.3")); err != nil {
		t.Errorf("the agent (root without CAP_DAC_OVERRIDE) feeding a resolver started afresh: %v", err)
	}
	lookup("its own user, generation 3 from the agent", netip.MustParseAddr("10.89.0.3"))
	for _, f := range []string{"roster.json", "exposure.json"} {
		if fi, err := os.Stat(filepath.Join(state, f)); err == nil {
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != nobody || fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: uid %d mode %v, want the resolver's user's alone", f, st.Uid, fi.Mode().Perm())
			}
		}
	}
	stop(p)
}

// freeLoopback53 returns port 53 of a loopback address nothing serves.
func freeLoopback53(t *testing.T) netip.AddrPort {
	t.Helper()
	for range 20 {
		var b [2]byte
		rand.Read(b[:])
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 100 + b[0]%100, 2 + b[1]%250}), 53)
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(a))
		if err != nil {
			continue
		}
		l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(a))
		u.Close()
		if err != nil {
			continue
		}
		l.Close()
		return a
	}
	t.Fatal("no free port 53 on 127.0.100.0/18")
	return netip.AddrPort{}
}

func fileAddr(a netip.AddrPort) string { return strings.ReplaceAll(a.String(), ":", "_") }

func chownTree(t *testing.T, root string, uid int) {
	t.Helper()
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkUser fails unless process pid runs as the resolver's user with
// CAP_NET_BIND_SERVICE (bit 10) its only capability, none to gain.
func checkUser(t *testing.T, pid int) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Uid": fmt.Sprintf("%d\t%d\t%d\t%d", nobody, nobody, nobody, nobody),
		"Gid": fmt.Sprintf("%d\t%d\t%d\t%d", nobody, nobody, nobody, nobody),
		// Groups: none.
		"Groups": "",
		"CapEff": "0000000000000400", "CapPrm": "0000000000000400",
		"CapBnd": "0000000000000400", "CapAmb": "0000000000000400",
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if w, ok := want[k]; ok {
			if got := strings.TrimSpace(v); got != w {
				t.Errorf("resolver pid %d: %s %q, want %q", pid, k, got, w)
			}
			delete(want, k)
		}
	}
	if len(want) > 0 {
		t.Errorf("resolver pid %d: /proc status lacks %v", pid, want)
	}
}

// agentUpdate puts r on the control socket at path as the agent's unit
// runs the agent: root, with no capability but CAP_NET_BIND_SERVICE (no
// CAP_DAC_OVERRIDE: root opens a file of another user only as others may).
func agentUpdate(t *testing.T, setpriv, path string, r *spec.Roster) error {
	t.Helper()
	body := fmt.Sprintf(`{"generation": %d, "zones": ["internal"], "names": {"gitea.novox.internal": [%q]}}`,
		r.Generation, r.Names["gitea.novox.internal"][0])
	cmd := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set=-all,+net_bind_service", "--",
		"curl", "-sS", "--fail-with-body", "--max-time", "10", "--unix-socket", path,
		"-X", "PUT", "-H", "Content-Type: application/json", "--data-binary", body, "http://resolver/v1/roster")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
