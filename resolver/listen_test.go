package resolver

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestListenRefusesForbidden(t *testing.T) {
	s, err := New(safeConfig(t, Config{Forbidden: func(a netip.AddrPort) error {
		if a.Port() == 53 {
			return errors.New("aardvark-dns serves it")
		}
		return nil
	}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Listen(netip.MustParseAddrPort("127.0.0.9:53"))
	if err == nil || !strings.Contains(err.Error(), "aardvark-dns serves it") {
		t.Errorf("Listen(forbidden) = %v, want the hook's reason", err)
	}
	if err := s.Listen(netip.MustParseAddrPort("0.0.0.0:5353")); err == nil {
		t.Error("Listen(0.0.0.0:5353) succeeded; an unspecified address answers from the wrong source")
	}
	if len(s.Listeners()) != 0 {
		t.Errorf("Listeners() = %v after refusals", s.Listeners())
	}
}

// TestListenRefusesTakenPort: an address another socket serves is never
// shared, whether the other socket is plain or set SO_REUSEADDR.
func TestListenRefusesTakenPort(t *testing.T) {
	other, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	taken := other.LocalAddr().(*net.UDPAddr).AddrPort()
	s, err := New(safeConfig(t, Config{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Listen(taken)
	if err == nil || !strings.Contains(err.Error(), "already served by another socket") {
		t.Errorf("Listen(%s, taken) = %v, want 'already served by another socket'", taken, err)
	}

	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	takenTCP := tcp.Addr().(*net.TCPAddr).AddrPort()
	err = s.Listen(takenTCP)
	if err == nil || !strings.Contains(err.Error(), "already served") {
		t.Errorf("Listen(%s, TCP taken) = %v, want 'already served'", takenTCP, err)
	}
	if len(s.Listeners()) != 0 {
		t.Errorf("Listeners() = %v after refusals", s.Listeners())
	}
}

func TestListenUnlisten(t *testing.T) {
	s, a1 := newTestServer(t, testRoster(7), Config{})
	a2, err := s.listen(netip.MustParseAddrPort("127.0.0.2:0"))
	if err != nil {
		t.Fatal(err)
	}
	// FREEBIND: an address this machine does not have (TEST-NET-1) binds;
	// nothing is sent to it.
	a3, err := s.listen(netip.MustParseAddrPort("192.0.2.53:0"))
	if err != nil {
		t.Fatalf("listen on a not-yet-existing address: %v", err)
	}
	want := []netip.AddrPort{a1, a2, a3}
	if diff := cmp.Diff(want, s.Listeners(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("Listeners() (-want +got):\n%s", diff)
	}
	if err := s.Listen(a2); err == nil {
		t.Error("listening twice on the same address succeeded")
	}
	if err := s.Unlisten(a2); err != nil {
		t.Fatal(err)
	}
	if err := s.Unlisten(a2); err == nil {
		t.Error("Unlisten of an address not listened on succeeded")
	}
	if err := s.Unlisten(a3); err != nil {
		t.Fatal(err)
	}
	// The port is free again: another socket can take it.
	c, err := net.ListenPacket("udp4", a2.String())
	if err != nil {
		t.Errorf("after Unlisten, %s is still bound: %v", a2, err)
	} else {
		c.Close()
	}
	if got := exchangeRaw(t, a1, packQuery(t, "gitea.novox.internal.", 1, false)); got == nil {
		t.Error("the remaining listener stopped answering")
	}
}

func TestPodmanDNSGuard(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dnsnet.json", `{"name": "dnsnet", "driver": "bridge", "subnets": [{"subnet": "10.89.0.0/24", "gateway": "10.89.0.1"}], "dns_enabled": true}`)
	write("plain.json", `{"name": "plain", "driver": "bridge", "subnets": [{"subnet": "10.90.0.0/24", "gateway": "10.90.0.1"}], "dns_enabled": false}`)
	write("broken.json", `{`)
	guard := PodmanDNSGuard(dir)
	tests := []struct {
		addr string
		ok   bool
	}{
		{"10.89.0.1:53", false},
		{"10.89.0.1:5353", true},
		{"10.90.0.1:53", true},
		{"10.88.0.1:53", true},
	}
	for _, tc := range tests {
		err := guard(netip.MustParseAddrPort(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("guard(%s) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), `"dnsnet"`) {
			t.Errorf("guard(%s) = %v, want it to name the network", tc.addr, err)
		}
	}
}

// TestPodmanDNSGuardBlind: a definition the resolver cannot read (it runs
// as a user of its own) refuses port 53 off loopback, rather than passing
// an address aardvark-dns may serve. As root, permissions refuse nothing:
// a definitions path that is not a directory stands in for one unreadable.
func TestPodmanDNSGuardBlind(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "dnsnet.json")
	if err := os.WriteFile(def, []byte(`{"name": "dnsnet", "subnets": [{"gateway": "10.89.0.1"}], "dns_enabled": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := []struct{ name, dir string }{{"a path that is not a directory", def}}
	if os.Geteuid() != 0 {
		locked := filepath.Join(t.TempDir(), "locked")
		if err := os.Mkdir(locked, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(locked, "x.json"), []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(locked, 0o000)
		t.Cleanup(func() { os.Chmod(locked, 0o700) })
		unreadable = append(unreadable, struct{ name, dir string }{"a directory of mode 0000", locked})
		os.Chmod(def, 0o000)
		t.Cleanup(func() { os.Chmod(def, 0o644) })
		unreadable = append(unreadable, struct{ name, dir string }{"a definition of mode 0000", dir})
	}
	for _, u := range unreadable {
		t.Run(u.name, func(t *testing.T) {
			guard := PodmanDNSGuard(u.dir, filepath.Join(dir, "missing"))
			for _, tc := range []struct {
				addr string
				ok   bool
			}{
				{"10.89.0.1:53", false},
				{"10.90.0.1:53", false},
				{"127.0.0.53:53", true},
				{"10.89.0.1:5353", true},
			} {
				err := guard(netip.MustParseAddrPort(tc.addr))
				if (err == nil) != tc.ok {
					t.Errorf("guard(%s) = %v, want ok=%v", tc.addr, err, tc.ok)
				}
				if err != nil && !strings.Contains(err.Error(), "cannot read podman's network definitions") {
					t.Errorf("guard(%s) = %v, want it to say what it cannot read", tc.addr, err)
				}
			}
		})
	}
	// A directory that does not exist defines no network.
	if err := PodmanDNSGuard(filepath.Join(dir, "missing"))(netip.MustParseAddrPort("10.89.0.1:53")); err != nil {
		t.Errorf("guard of a missing directory = %v, want nil", err)
	}
}

func TestUpstreamsSkipOwnListeners(t *testing.T) {
	s, addr := newTestServer(t, testRoster(7), Config{})
	other := netip.MustParseAddrPort("127.0.0.1:9")
	s.setUpstreams([]netip.AddrPort{addr, other})
	if diff := cmp.Diff([]netip.AddrPort{other}, s.upstreams(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("upstreams() (-want +got):\n%s", diff)
	}
}

func TestParseResolvConf(t *testing.T) {
	got := parseResolvConf([]byte("# comment\nnameserver 127.0.0.53\nsearch example\nnameserver ::1\nnameserver bogus\noptions edns0\n"))
	want := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.53:53"), netip.MustParseAddrPort("[::1]:53")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("parseResolvConf (-want +got):\n%s", diff)
	}
}

// TestResolvConfReload: the upstreams follow resolv.conf, replaced by rename.
func TestResolvConfReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(path, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{ResolvConf: path, Forbidden: func(netip.AddrPort) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.upstreams(); len(got) != 1 || got[0] != netip.MustParseAddrPort("127.0.0.1:53") {
		t.Fatalf("upstreams = %v, want [127.0.0.1:53]", got)
	}
	tmp := filepath.Join(dir, "resolv.conf.new")
	if err := os.WriteFile(tmp, []byte("nameserver 127.0.0.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		got := s.upstreams()
		return len(got) == 1 && got[0] == netip.MustParseAddrPort("127.0.0.2:53")
	}, "upstreams to become 127.0.0.2:53")
}

// TestUDPPending checks what a roster swap steps aside for: a datagram in
// the listener's receive queue.
func TestUDPPending(t *testing.T) {
	l, err := bind(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if l.udpPending() {
		t.Fatal("udpPending = true on a fresh socket")
	}
	c, err := net.Dial("udp4", l.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !l.udpPending() {
		if time.Now().After(deadline) {
			t.Fatal("udpPending stayed false with a datagram sent to the socket")
		}
		time.Sleep(time.Millisecond)
	}
	buf := make([]byte, 64)
	if _, _, err := l.udp.ReadFromUDPAddrPort(buf); err != nil {
		t.Fatal(err)
	}
	if l.udpPending() {
		t.Error("udpPending = true after the only datagram was read")
	}
}
