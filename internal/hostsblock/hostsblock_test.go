package hostsblock

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

func entries(pairs ...string) []spec.HostEntry {
	var out []spec.HostEntry
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, spec.HostEntry{Name: pairs[i], Addr: netip.MustParseAddr(pairs[i+1])})
	}
	return out
}

const debianHosts = "127.0.0.1\tlocalhost\n127.0.1.1\tace\n\n# The following lines are desirable for IPv6 capable hosts\n::1     localhost ip6-localhost ip6-loopback\n"

func block(lines ...string) string {
	return Begin + "\n" + strings.Join(lines, "") + End + "\n"
}

func TestSplice(t *testing.T) {
	two := entries("web.ace.internal", "10.0.0.2", "api.ace.internal", "10.0.0.1")
	for _, tc := range []struct {
		name    string
		content string
		entries []spec.HostEntry
		want    string
	}{
		{"appended", debianHosts, two, debianHosts + block("10.0.0.1\tapi.ace.internal\n", "10.0.0.2\tweb.ace.internal\n")},
		{"appended after a last line without newline", "127.0.0.1 localhost", two, "127.0.0.1 localhost\n" + block("10.0.0.1\tapi.ace.internal\n", "10.0.0.2\tweb.ace.internal\n")},
		{"empty file", "", two[:1], block("10.0.0.2\tweb.ace.internal\n")},
		{"replaced in place, lines around kept byte for byte", "a  b\r\n" + block("10.9.9.9\told.internal\n") + "# after\n  x\ty  \n",
			two[:1], "a  b\r\n" + block("10.0.0.2\tweb.ace.internal\n") + "# after\n  x\ty  \n"},
		{"removed", debianHosts + block("10.9.9.9\told.internal\n") + "tail\n", nil, debianHosts + "tail\n"},
		{"nothing to remove", debianHosts, nil, debianHosts},
		{"sorted, canonical, deduplicated", "", entries("B.internal.", "10.0.0.2", "a.internal", "fd00::1", "b.internal", "10.0.0.2", "a.internal", "::ffff:10.0.0.1"),
			block("10.0.0.1\ta.internal\n", "fd00::1\ta.internal\n", "10.0.0.2\tb.internal\n")},
		{"CRLF markers", "x\r\n" + Begin + "\r\n1.2.3.4\told\r\n" + End + "\r\ny\r\n", two[:1], "x\r\n" + block("10.0.0.2\tweb.ace.internal\n") + "y\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Splice([]byte(tc.content), tc.entries)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("Splice (-want +got):\n%s", diff)
			}
			again, err := Splice(got, tc.entries)
			if err != nil || !bytes.Equal(again, got) {
				t.Errorf("Splice is not idempotent: %q, %v", again, err)
			}
		})
	}
}

// TestSpliceRefuses: damaged markers and names that would inject a line
// change nothing.
func TestSpliceRefuses(t *testing.T) {
	one := entries("web.internal", "10.0.0.2")
	for _, tc := range []struct {
		name    string
		content string
		entries []spec.HostEntry
		markers bool
	}{
		{"begin without end", debianHosts + Begin + "\n1.2.3.4\tx\n", one, true},
		{"end without begin", debianHosts + End + "\n", one, true},
		{"two blocks", block() + block(), one, true},
		{"end before begin", End + "\n" + Begin + "\n", nil, true},
		{"name injects a line", debianHosts, entries("x\n10.6.6.6 evil", "10.0.0.2"), false},
		{"name with a space", debianHosts, entries("a b", "10.0.0.2"), false},
		{"no address", debianHosts, []spec.HostEntry{{Name: "a.internal"}}, false},
		{"too many", debianHosts, make([]spec.HostEntry, MaxEntries+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Splice([]byte(tc.content), tc.entries)
			if err == nil {
				t.Fatalf("Splice = %q, nil; want an error", got)
			}
			if errors.Is(err, ErrMarkers) != tc.markers {
				t.Errorf("Splice error %v: errors.Is(ErrMarkers) = %v, want %v", err, !tc.markers, tc.markers)
			}
		})
	}
}

// TestWrite: the file is replaced (a new inode: a rename, never a
// truncate-and-write a reader could see half of) with its mode, and not
// touched when nothing changes; Remove takes the block out.
func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(debianHosts), 0o644); err != nil {
		t.Fatal(err)
	}
	ino := func() uint64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("mode %v, want 0644", st.Mode().Perm())
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	before := ino()
	es := entries("web.ace.internal", "10.0.0.2")
	if err := Write(path, es); err != nil {
		t.Fatal(err)
	}
	after := ino()
	if after == before {
		t.Error("Write rewrote the file in place; want a rename")
	}
	if err := Write(path, es); err != nil {
		t.Fatal(err)
	}
	if ino() != after {
		t.Error("Write with the same entries replaced the file")
	}
	if entries, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(entries) != 0 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != debianHosts {
		t.Errorf("after Remove: %q, want the file as it was", got)
	}
	if err := Remove(filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("Remove(missing file) = %v, want nil", err)
	}
	if err := Write(filepath.Join(t.TempDir(), "none"), es); err == nil {
		t.Error("Write(missing file) = nil, want an error: a host without a hosts file is not ours to make")
	}
}

// TestGetentThroughGlibc: the block as glibc reads it. The written file is
// bind-mounted over /etc/hosts in a private mount namespace (never the
// real file), and getent hosts, which goes through nsswitch and glibc's
// files lookup, finds the block's names and still the file's own lines.
// Nothing is sent: every name asked is in the file ("files" comes first
// in nsswitch.conf; the test skips where it does not).
func TestGetentThroughGlibc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a private mount namespace")
	}
	for _, bin := range []string{"unshare", "getent", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s", bin)
		}
	}
	ns, err := os.ReadFile("/etc/nsswitch.conf")
	if err != nil || !strings.Contains(string(ns), "\nhosts:          files") && !strings.Contains(string(ns), "\nhosts: files") {
		t.Skip("nsswitch.conf does not look up hosts in files first")
	}
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(debianHosts), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, entries("web.ace.internal", "10.77.0.2", "api.ace.internal", "fd77::1")); err != nil {
		t.Fatal(err)
	}
	script := `mount --bind "$1" /etc/hosts && getent hosts web.ace.internal && getent ahostsv6 api.ace.internal | head -1 && getent ahostsv4 localhost | head -1`
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", path).CombinedOutput()
	if err != nil {
		t.Fatalf("getent in a private mount namespace: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	for _, want := range []string{"10.77.0.2", "web.ace.internal", "fd77::1", "127.0.0.1", "localhost"} {
		if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+want+" ") {
			t.Errorf("getent output lacks %s:\n%s", want, out)
		}
	}
}

func FuzzSplice(f *testing.F) {
	f.Add([]byte(debianHosts), "a.internal", "10.0.0.1")
	f.Add([]byte(debianHosts+block("1.2.3.4\tx\n")), "b.internal", "fd00::1")
	f.Add([]byte("x"), "", "")
	f.Fuzz(func(t *testing.T, content []byte, name, addr string) {
		var es []spec.HostEntry
		if a, err := netip.ParseAddr(addr); err == nil {
			es = []spec.HostEntry{{Name: name, Addr: a}}
		}
		got, err := Splice(content, es)
		if err != nil {
			return
		}
		// Taking the block out again leaves exactly the lines outside it.
		removed, err := Splice(got, nil)
		if err != nil {
			t.Fatalf("Splice(Splice(c, e), nil): %v", err)
		}
		orig, err := Splice(content, nil)
		if err != nil {
			t.Fatalf("Splice(c, nil): %v", err)
		}
		if !bytes.Equal(bytes.TrimRight(removed, "\n"), bytes.TrimRight(orig, "\n")) {
			t.Errorf("outside the block:\n%q\nbecame\n%q", orig, removed)
		}
	})
}
