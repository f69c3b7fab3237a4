package main

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// lookup asks server for name's A records; "" when it does not resolve.
func lookup(server netip.AddrPort, name string) string {
	return lookupWithin(server, name, time.Second)
}

// lookupWithin is lookup with its own timeout.
func lookupWithin(server netip.AddrPort, name string, timeout time.Duration) string {
	r, err := dnstest.Exchange(dns.NewMsg(name, dns.TypeA), "udp", server.String(), timeout)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return ""
	}
	return r.Answer[0].(*dns.A).A.Addr.String()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeAtomic replaces path by a rename, as controllers and editors do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestResolverCommand(t *testing.T) {
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster.json")
	writeAtomic(t, roster, `{"generation": 1, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"]}}`)
	addr := dnstest.FreePort(t)
	stderr := &syncbuf.Buffer{}
	env := &environment{stdout: &syncbuf.Buffer{}, stderr: stderr, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, env, []string{"resolver", "--roster", roster, "--listen", addr.String(),
			"--upstream", "127.0.0.1:9", "--state", filepath.Join(dir, "state.json")})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("meshhost resolver exited %d:\n%s", code, stderr)
		}
	}()
	waitUntil(t, "the roster answers", func() bool { return lookup(addr, "gitea.novox.internal.") == "10.89.0.7" })

	// A change to the file (an atomic rename) reloads it.
	writeAtomic(t, roster, `{"generation": 2, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.8"]}}`)
	waitUntil(t, "generation 2 answers\n"+stderr.String(), func() bool { return lookup(addr, "gitea.novox.internal.") == "10.89.0.8" })

	// An invalid roster is refused with an error naming the entry; the
	// previous one keeps serving.
	writeAtomic(t, roster, `{"generation": 3, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.9"], "bad..name.internal": ["10.0.0.1"]}}`)
	waitUntil(t, "the refusal is logged", func() bool { return strings.Contains(stderr.String(), `names[\"bad..name.internal\"]`) })
	if got := lookupWithin(addr, "gitea.novox.internal.", 3*time.Second); got != "10.89.0.8" {
		t.Errorf("after an invalid roster, gitea.novox.internal = %q, want the previous 10.89.0.8", got)
	}

	// SIGHUP reloads too. The file is rewritten through a hard link in
	// another directory, which the directory watch does not see, so only
	// the signal can bring generation 4 in.
	other := t.TempDir()
	link := filepath.Join(other, "link.json")
	if err := os.Link(roster, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(link, []byte(`{"generation": 4, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.10"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := lookupWithin(addr, "gitea.novox.internal.", 3*time.Second); got != "10.89.0.8" {
		t.Fatalf("before SIGHUP, gitea.novox.internal = %q; the hard-link write was seen by the watch, so this test proves nothing", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "SIGHUP brings generation 4", func() bool { return lookup(addr, "gitea.novox.internal.") == "10.89.0.10" })
}

// TestResolverCommandUsage: a value a flag does not take is usage (64);
// a configuration that lacks what the resolver needs (which a
// configuration file may give) is refused as the agent's is (78).
func TestResolverCommandUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"resolver"}, exitConfig},
		{[]string{"resolver", "--roster", "x.json"}, exitConfig},
		{[]string{"resolver", "--roster", "x.json", "--listen", "nonsense"}, exitUsage},
		{[]string{"resolver", "--roster", "x.json", "--listen", "127.0.0.1:5353", "--allow", "10.0.0.0/99"}, exitUsage},
	} {
		stderr := &syncbuf.Buffer{}
		env := &environment{stdout: &syncbuf.Buffer{}, stderr: stderr, getenv: func(string) string { return "" }}
		if code := run(context.Background(), env, c.args); code != c.code {
			t.Errorf("meshhost %v exited %d, want %d\n%s", c.args, code, c.code, stderr)
		}
	}
}

func TestResolverCommandBadRoster(t *testing.T) {
	roster := filepath.Join(t.TempDir(), "roster.json")
	writeAtomic(t, roster, `{"generation": 1, "zones": ["internal"], "names": {"-x.internal": ["10.0.0.1"]}}`)
	stderr := &syncbuf.Buffer{}
	env := &environment{stdout: &syncbuf.Buffer{}, stderr: stderr, getenv: func(string) string { return "" }}
	code := run(context.Background(), env, []string{"resolver", "--roster", roster, "--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9"})
	if code != 1 || !strings.Contains(stderr.String(), `names[\"-x.internal\"]`) && !strings.Contains(stderr.String(), `names["-x.internal"]`) {
		t.Errorf("meshhost resolver with an invalid roster exited %d, want 1 and the entry named:\n%s", code, stderr)
	}
}

// TestResolverCommandGenerationsCannotLie: a roster file that repeats the
// served generation is taken as unchanged only when it names the same
// addresses; with other addresses, or with an older generation, it is
// refused, logged with the generation and what differs, and the served
// roster stays.
func TestResolverCommandGenerationsCannotLie(t *testing.T) {
	dir := t.TempDir()
	roster := filepath.Join(dir, "roster.json")
	writeAtomic(t, roster, `{"generation": 5, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"], "db.novox.internal": ["10.89.0.8"]}}`)
	addr := dnstest.FreePort(t)
	stderr := &syncbuf.Buffer{}
	env := &environment{stdout: &syncbuf.Buffer{}, stderr: stderr, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, env, []string{"resolver", "--roster", roster, "--listen", addr.String(), "--upstream", "127.0.0.1:9"})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("meshhost resolver exited %d:\n%s", code, stderr)
		}
	}()
	waitUntil(t, "the roster answers", func() bool { return lookup(addr, "gitea.novox.internal.") == "10.89.0.7" })

	// The same roster again (another spelling of it): unchanged, no fault.
	writeAtomic(t, roster, `{"names": {"db.novox.internal": ["10.89.0.8"], "GITEA.novox.internal.": ["10.89.0.7"]}, "zones": ["internal"], "generation": 5}`)
	waitUntil(t, "the repeat is taken as unchanged", func() bool { return strings.Contains(stderr.String(), "roster file unchanged") })

	// Generation 5 with gitea moved, db gone and a name added: refused.
	writeAtomic(t, roster, `{"generation": 5, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.99"], "new.novox.internal": ["10.89.0.9"]}}`)
	waitUntil(t, "the lie is refused\n"+stderr.String(), func() bool { return strings.Contains(stderr.String(), "generation 5 is served with other names") })
	log := stderr.String()
	for _, want := range []string{
		`names[\"gitea.novox.internal\"]: served 10.89.0.7, here 10.89.0.99`,
		`names[\"db.novox.internal\"]: served, missing here`,
		`names[\"new.novox.internal\"]: not in the served roster`,
		"a changed roster needs a newer generation",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, log)
		}
	}
	if got := lookupWithin(addr, "gitea.novox.internal.", 3*time.Second); got != "10.89.0.7" {
		t.Errorf("after the refused roster, gitea.novox.internal = %q, want 10.89.0.7 still", got)
	}

	// An older generation: refused.
	writeAtomic(t, roster, `{"generation": 4, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.1"]}}`)
	waitUntil(t, "the older roster is refused", func() bool {
		return strings.Contains(stderr.String(), "generation 4 is older than generation 5, which is served")
	})
	if got := lookupWithin(addr, "gitea.novox.internal.", 3*time.Second); got != "10.89.0.7" {
		t.Errorf("after the older roster, gitea.novox.internal = %q, want 10.89.0.7 still", got)
	}
}
