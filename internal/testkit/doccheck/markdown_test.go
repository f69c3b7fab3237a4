package doccheck

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the directory holding the module's go.mod, found upward from
// the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// docFiles lists README.md and every .md file under docs/, relative to
// root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// A link is a markdown link's target, where it was found.
type link struct {
	line   int
	target string
}

var (
	linkRE       = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE   = regexp.MustCompile("`[^`]*`")
	headingRE    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	inlineLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// prose calls fn with each line of markdown text outside code: fenced and
// indented code blocks are skipped, and code spans blanked.
func prose(text string, fn func(n int, line string)) {
	fenced := false
	prevBlank := true
	inIndented := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			fenced = !fenced
			prevBlank = false
			continue
		}
		if fenced {
			continue
		}
		// An indented code block starts after a blank line with four
		// spaces (a list item's continuation is indented less).
		if strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			if prevBlank || inIndented {
				inIndented = true
				continue
			}
		} else if trimmed != "" {
			inIndented = false
		}
		prevBlank = trimmed == ""
		fn(n, codeSpanRE.ReplaceAllString(line, "``"))
	}
}

// links returns the targets of the markdown links in text, a link's text
// may run over lines.
func links(text string) []link {
	var b strings.Builder
	n := 0
	prose(text, func(at int, line string) {
		for ; n < at-1; n++ {
			b.WriteByte('\n') // code lines stay lines, so offsets give line numbers
		}
		b.WriteString(line)
		b.WriteByte('\n')
		n = at
	})
	p := b.String()
	var out []link
	for _, m := range linkRE.FindAllStringSubmatchIndex(p, -1) {
		out = append(out, link{1 + strings.Count(p[:m[0]], "\n"), p[m[2]:m[3]]})
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of text: the
// heading lowercased, its punctuation dropped (letters, digits, spaces,
// hyphens and underscores kept), spaces made hyphens; a repeated one gets
// -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		title := inlineLinkRE.ReplaceAllString(m[2], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// brokenLinks checks the relative links of the markdown file rel (relative
// to root) and returns one message per link that does not resolve to a
// file or directory inside root, or to a heading of the markdown file it
// names.
func brokenLinks(root, rel string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links(string(data)) {
		if schemeRE.MatchString(l.target) {
			continue // http:, https:, mailto: ...: not the repository's
		}
		file, anchor, _ := strings.Cut(l.target, "#")
		where := rel + ":" + strconv.Itoa(l.line) + ": " + l.target
		target := filepath.Join(root, rel) // "#anchor" alone: this file
		if file != "" {
			if strings.HasPrefix(file, "/") {
				out = append(out, where+": an absolute path; link relative to the file")
				continue
			}
			target = filepath.Join(filepath.Dir(filepath.Join(root, rel)), filepath.FromSlash(file))
		}
		inside, err := filepath.Rel(root, target)
		if err != nil || inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) {
			out = append(out, where+": outside the repository")
			continue
		}
		fi, err := os.Stat(target)
		if err != nil {
			out = append(out, where+": no such file in the repository")
			continue
		}
		if anchor == "" {
			continue
		}
		if fi.IsDir() || !strings.HasSuffix(target, ".md") {
			out = append(out, where+": an anchor into a file that is not markdown")
			continue
		}
		td, err := os.ReadFile(target)
		if err != nil {
			return nil, err
		}
		if !anchors(string(td))[anchor] {
			out = append(out, where+": no heading with anchor #"+anchor+" in "+inside)
		}
	}
	return out, nil
}
