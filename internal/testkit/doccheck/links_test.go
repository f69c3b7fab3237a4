package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLinksResolve: every relative link of README.md and docs/**/*.md
// names a file or directory of the repository, and its anchor, if any, a
// heading of that file.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	files := docFiles(t, root)
	if len(files) < 2 {
		t.Fatalf("found %v; want README.md and docs/*.md", files)
	}
	total := 0
	for _, rel := range files {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		total += len(links(string(data)))
		broken, err := brokenLinks(root, rel)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range broken {
			t.Error(b)
		}
	}
	if total == 0 {
		t.Fatal("no link found in any documentation file: is the link reader broken?")
	}
}

// TestBrokenLinks: the checker itself, on a small tree: each kind of
// broken link is reported, links that resolve are not, and links in code
// are not links.
func TestBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("examples/a.json", "{}")
	write("docs/guide.md", "# Guide\n\n## Before you remove, rename or move a machine\n\n## 1. Resolver first\n\n## Flag `auto`\n\n## Same\n\n## Same\n")
	write("README.md", strings.Join([]string{
		"# Top",
		"[ok file](examples/a.json) [ok dir](docs/) [ok anchor](docs/guide.md#before-you-remove-rename-or-move-a-machine)",
		"[ok numbered](docs/guide.md#1-resolver-first) [ok code](docs/guide.md#flag-auto) [ok repeat](docs/guide.md#same-1)",
		"[ok self](#top) [web](https://example.com/x) [mail](mailto:a@b)",
		"[missing](examples/new.json)",
		"[bad anchor](docs/guide.md#nowhere)",
		"[outside](../shared/DESIGN.md)",
		"[absolute](/etc/passwd)",
		"[anchor into json](examples/a.json#x)",
		"[over two",
		"lines](docs/guide.md#not-here)",
		"`[in a code span](nowhere.md)`",
		"",
		"    [in an indented block](nowhere.md)",
		"",
		"```",
		"[in a fence](nowhere.md)",
		"```",
	}, "\n"))
	got, err := brokenLinks(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:5: examples/new.json: no such file in the repository",
		"README.md:6: docs/guide.md#nowhere: no heading with anchor #nowhere in docs/guide.md",
		"README.md:7: ../shared/DESIGN.md: outside the repository",
		"README.md:8: /etc/passwd: an absolute path; link relative to the file",
		"README.md:9: examples/a.json#x: an anchor into a file that is not markdown",
		"README.md:10: docs/guide.md#not-here: no heading with anchor #not-here in docs/guide.md",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("brokenLinks (-want +got):\n%s", diff)
	}
}
