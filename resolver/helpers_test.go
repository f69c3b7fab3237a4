package resolver

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"codeberg.org/miekg/dns"
	"codeberg.org/miekg/dns/rdata"
	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

// testRoster is the roster of the example, plus names that make
// each behaviour testable.
func testRoster(gen uint64) *spec.Roster {
	return &spec.Roster{
		Generation: gen,
		Zones:      []string{"internal"},
		Names: map[string][]netip.Addr{
			"gitea.novox.internal":  {netip.MustParseAddr("10.89.0.7")},
			"searxng.zurag.be":      {netip.MustParseAddr("100.64.0.9"), netip.MustParseAddr("fd7a::9")},
			"v6only.novox.internal": {netip.MustParseAddr("fd7a::6")},
			// 60 addresses: over 512 bytes without EDNS.
			"many.novox.internal": manyAddrs(60),
		},
	}
}

func manyAddrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{10, 90, 0, byte(i + 1)})
	}
	return out
}

// newTestServer starts a server on a free 127.0.0.1 port with the given
// roster (nil: none) and upstreams, and returns it and its address.
func newTestServer(t *testing.T, r *spec.Roster, cfg Config) (*Server, netip.AddrPort) {
	t.Helper()
	s, err := New(safeConfig(t, cfg))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if r != nil {
		if err := s.Update(r); err != nil {
			t.Fatalf("Update: %v", err)
		}
	}
	addr, err := s.listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return s, addr
}

// safeConfig keeps a test server's traffic on loopback: without upstreams
// of its own it reads an empty resolv.conf, never the machine's.
func safeConfig(t testing.TB, cfg Config) Config {
	t.Helper()
	if len(cfg.Upstreams) == 0 && cfg.ResolvConf == "" {
		cfg.ResolvConf = writeFile(t, "resolv.conf", "")
	}
	for _, u := range cfg.Upstreams {
		if !u.Addr().IsLoopback() {
			t.Fatalf("test upstream %s is not on loopback", u)
		}
	}
	if cfg.Forbidden == nil {
		cfg.Forbidden = func(netip.AddrPort) error { return nil }
	}
	// The tests' upstreams count the questions they get: the loop check
	// asks none (loop_test.go turns it on).
	cfg.NoLoopQuestions = true
	return cfg
}

func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := t.TempDir() + "/" + name
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// stub is a loopback DNS server standing in for an upstream.
type stub struct {
	addr netip.AddrPort
	udp  net.PacketConn
	tcp  net.Listener
}

// startStub serves answer on a free loopback port, over UDP and TCP. answer
// returns nil to stay silent.
func startStub(t *testing.T, answer func(q *dns.Msg, tcp bool) *dns.Msg) *stub {
	t.Helper()
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp4", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			if attempt < 10 {
				continue
			}
			t.Fatal(err)
		}
		s := &stub{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort(), udp: pc, tcp: ln}
		t.Cleanup(func() { pc.Close(); ln.Close() })
		go s.serveUDP(answer)
		go s.serveTCP(answer)
		return s
	}
}

func (s *stub) serveUDP(answer func(*dns.Msg, bool) *dns.Msg) {
	buf := make([]byte, 65535)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		q := &dns.Msg{Data: append([]byte(nil), buf[:n]...)}
		if q.Unpack() != nil {
			continue
		}
		r := answer(q, false)
		if r == nil {
			continue
		}
		if r.Pack() != nil {
			continue
		}
		limit := 512
		if q.UDPSize > 512 {
			limit = int(q.UDPSize)
		}
		if len(r.Data) > limit {
			r.Answer, r.Ns, r.Extra = nil, nil, nil
			r.Truncated = true
			r.Data = nil
			r.Pack()
		}
		s.udp.WriteTo(r.Data, from)
	}
}

func (s *stub) serveTCP(answer func(*dns.Msg, bool) *dns.Msg) {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			var lb [2]byte
			if _, err := io.ReadFull(c, lb[:]); err != nil {
				return
			}
			b := make([]byte, binary.BigEndian.Uint16(lb[:]))
			if _, err := io.ReadFull(c, b); err != nil {
				return
			}
			q := &dns.Msg{Data: b}
			if q.Unpack() != nil {
				return
			}
			r := answer(q, true)
			if r == nil || r.Pack() != nil {
				return
			}
			c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(r.Data))))
			c.Write(r.Data)
		}()
	}
}

// upstreamAnswer is the test upstream: a few names, one silent, one failing,
// one too big for UDP.
func upstreamAnswer(q *dns.Msg, tcp bool) *dns.Msg {
	name := strings.ToLower(q.Question[0].Header().Name)
	r := new(dns.Msg)
	r.ID, r.Response, r.RecursionAvailable, r.RecursionDesired = q.ID, true, true, q.RecursionDesired
	r.Opcode = q.Opcode
	r.Question = q.Question
	if q.UDPSize > 0 {
		r.UDPSize = 1232
	}
	hdr := dns.Header{Name: q.Question[0].Header().Name, Class: dns.ClassINET, TTL: 60}
	switch name {
	case "example.com.", "other.zurag.be.", "web.dns.podman.", "web.":
		r.Answer = []dns.RR{&dns.A{Hdr: hdr, A: rdata.A{Addr: netip.MustParseAddr("192.0.2.10")}}}
	case "silent.example.com.":
		return nil
	case "fail.example.com.":
		r.Rcode = dns.RcodeServerFailure
	case "big.example.com.":
		for i := range 40 {
			r.Answer = append(r.Answer, &dns.TXT{Hdr: hdr, TXT: rdata.TXT{Txt: []string{strings.Repeat("x", 20) + string(rune('a'+i%26))}}})
		}
	case "99.2.0.192.in-addr.arpa.":
		r.Answer = []dns.RR{&dns.PTR{Hdr: hdr, PTR: rdata.PTR{Ptr: "upstream.example."}}}
	default:
		r.Rcode = dns.RcodeNameError
	}
	return r
}

// digResult is what dig printed.
type digResult struct {
	status     string
	flags      []string
	answer     []string // records, whitespace normalized
	authority  []string
	additional []string
	raw        string
}

func (d digResult) hasFlag(f string) bool {
	for _, x := range d.flags {
		if x == f {
			return true
		}
	}
	return false
}

// needDig returns the path of dig, skipping the test without it (failing
// under CI=true, where it must be installed).
func needDig(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("dig")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("dig is required under CI (Debian package bind9-dnsutils): %v", err)
		}
		t.Skip("dig not found; install bind9-dnsutils to run the conformance tests")
	}
	return p
}

// dig asks server with a real dig and parses its answer.
func dig(t *testing.T, server netip.AddrPort, args ...string) digResult {
	t.Helper()
	bin := needDig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	full := append([]string{"@" + server.Addr().String(), "-p", strconv.Itoa(int(server.Port())), "+tries=1", "+time=5"}, args...)
	out, err := exec.CommandContext(ctx, bin, full...).CombinedOutput()
	res := digResult{raw: string(out)}
	if err != nil && !strings.Contains(res.raw, "status:") {
		t.Fatalf("dig %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	section := ""
	for _, line := range strings.Split(res.raw, "\n") {
		switch {
		case strings.Contains(line, "->>HEADER<<-"):
			if i := strings.Index(line, "status: "); i >= 0 {
				res.status = strings.TrimSuffix(strings.Fields(line[i+8:])[0], ",")
			}
		case strings.HasPrefix(line, ";; flags:"):
			f := strings.TrimPrefix(line, ";; flags:")
			f = f[:strings.Index(f, ";")]
			res.flags = strings.Fields(f)
		case strings.HasPrefix(line, ";; ANSWER SECTION:"):
			section = "answer"
		case strings.HasPrefix(line, ";; AUTHORITY SECTION:"):
			section = "authority"
		case strings.HasPrefix(line, ";; ADDITIONAL SECTION:"):
			section = "additional"
		case strings.TrimSpace(line) == "":
			section = ""
		case strings.HasPrefix(line, ";"):
		default:
			rec := strings.Join(strings.Fields(line), " ")
			switch section {
			case "answer":
				res.answer = append(res.answer, rec)
			case "authority":
				res.authority = append(res.authority, rec)
			case "additional":
				res.additional = append(res.additional, rec)
			}
		}
	}
	return res
}

// exchangeRaw sends a raw query over UDP and returns the raw reply (nil on
// timeout).
func exchangeRaw(t *testing.T, server netip.AddrPort, q []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", server.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// packQuery packs a query for name and type.
func packQuery(t testing.TB, name string, qtype uint16, edns bool) []byte {
	t.Helper()
	m := dns.NewMsg(name, qtype)
	if m == nil {
		t.Fatalf("NewMsg(%q, %d) = nil", name, qtype)
	}
	m.ID = 0x1234
	m.RecursionDesired = true
	if edns {
		m.UDPSize = 1232
	}
	if err := m.Pack(); err != nil {
		t.Fatal(err)
	}
	return m.Data
}

func unpack(t testing.TB, b []byte) *dns.Msg {
	t.Helper()
	m := &dns.Msg{Data: b}
	if err := m.Unpack(); err != nil {
		t.Fatalf("reply does not parse: %v (%x)", err, b)
	}
	return m
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cmpAddr compares netip values, whose fields cmp cannot see.
var cmpAddr = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
}
