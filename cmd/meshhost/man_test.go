package main

import (
	"bytes"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestManPages: the pages meshhost man writes are the package's: each in
// its section (the daemons in 8), each with FILES, ENVIRONMENT, SIGNALS
// and EXIT STATUS, every page it refers to one that exists in the section
// named, nothing of the machine that wrote them (no host name as
// --machine's default, no home or working directory), dated by
// SOURCE_DATE_EPOCH, and the same bytes each time.
func TestManPages(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1796000000") // 2026-11-29
	write := func() (string, map[string][]byte) {
		dir := t.TempDir()
		if code, _, stderr := runCLI(t, nil, "man", "--dir", dir); code != 0 {
			t.Fatalf("meshhost man = exit %d\n%s", code, stderr)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		pages := map[string][]byte{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			pages[e.Name()] = b
		}
		return dir, pages
	}
	_, pages := write()
	_, again := write()
	for name, b := range pages {
		if !bytes.Equal(b, again[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	if len(again) != len(pages) {
		t.Errorf("two runs wrote %d and %d pages", len(pages), len(again))
	}

	for _, want := range []string{"meshhost.1", "meshhost-agent.8", "meshhost-resolver.8", "meshhost-plan.1", "meshhost-config.1"} {
		if pages[want] == nil {
			t.Errorf("no %s among %v", want, keys(pages))
		}
	}
	for _, unwanted := range []string{"meshhost-agent.1", "meshhost-resolver.1", "meshhost-man.1"} {
		if pages[unwanted] != nil {
			t.Errorf("%s written: daemons are in section 8, meshhost man is hidden", unwanted)
		}
	}

	ref := regexp.MustCompile(`meshhost(\\?-[a-z]+)*\(([0-9])\)`)
	// The values of this machine a page could hold, found here rather
	// than taken from the code under test: names as a default whole,
	// paths anywhere.
	var names, paths []string
	names = append(names, defaultMachine())
	if h, err := os.Hostname(); err == nil {
		names = append(names, h)
	}
	if u, err := user.Current(); err == nil {
		names = append(names, u.Username)
	}
	if h, err := os.UserHomeDir(); err == nil && len(h) > 1 {
		paths = append(paths, h)
	}
	if d, err := os.Getwd(); err == nil && len(d) > 1 {
		paths = append(paths, d)
	}
	for name, b := range pages {
		page := string(b)
		for _, s := range []string{".SH FILES\n", ".SH ENVIRONMENT\n", ".SH SIGNALS\n", ".SH EXIT STATUS\n", ".SH SEE ALSO\n"} {
			if !strings.Contains(page, s) {
				t.Errorf("%s has no %q section", name, strings.TrimSpace(s))
			}
		}
		if !strings.Contains(page, `"Nov 2026"`) {
			t.Errorf("%s is not dated by SOURCE_DATE_EPOCH (Nov 2026): %.120s", name, page)
		}
		section := name[strings.LastIndexByte(name, '.')+1:]
		if !strings.Contains(page, "\n.TH \""+strings.ToUpper(strings.TrimSuffix(name, "."+section))+"\" \""+section+"\"") {
			t.Errorf("%s's title line is not its own: %.80s", name, page)
		}
		for _, m := range ref.FindAllString(page, -1) {
			target := strings.ReplaceAll(m[:strings.IndexByte(m, '(')], `\-`, "-") + "." + m[len(m)-2:len(m)-1]
			if pages[target] == nil {
				t.Errorf("%s refers to %s, which is not written", name, m)
			}
		}
		for _, v := range names {
			if v != "" && strings.Contains(page, `="`+v+`"`) {
				t.Errorf("%s holds %q, a name of the machine that wrote it, as a default", name, v)
			}
		}
		for _, v := range paths {
			if strings.Contains(page, v) {
				t.Errorf("%s holds %q, a directory of the machine that wrote it", name, v)
			}
		}
	}
	if !strings.Contains(string(pages["meshhost-agent.8"]), `\fB--machine\fP="the host name`) {
		t.Errorf("meshhost-agent.8 does not describe --machine's default as the host name")
	}
	for _, flag := range []string{"--roster", "--listen", "--state-dir", "--control", "--metrics"} {
		if !strings.Contains(string(pages["meshhost-resolver.8"]), `\fB`+flag+`\fP`) {
			t.Errorf("meshhost-resolver.8 documents no %s", flag)
		}
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
