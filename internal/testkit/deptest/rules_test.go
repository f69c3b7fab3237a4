package deptest

import (
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// podmanBindings are the import paths only the podman adapter may import:
// the podman bindings and the libraries that come with them.
var podmanBindings = []string{"github.com/containers/", "go.podman.io/"}

func isPodman(path string) bool {
	return slices.ContainsFunc(podmanBindings, func(p string) bool { return strings.HasPrefix(path, p) })
}

// TestLeaves: spec imports only the standard library; digest, admit and
// the roster guard only the standard library and spec. Anything that
// speaks the vocabulary builds without podman, DNS or JSON-reader code,
// and every path that admits an input (the resolver's included) may
// import the admission rule.
func TestLeaves(t *testing.T) {
	mod, pkgs := List(t, "./spec", "./digest", "./internal/admit", "./pass/rosterguard")
	for _, tc := range []struct {
		pkg   string
		allow []string
	}{
		{mod + "/spec", nil},
		{mod + "/digest", []string{mod + "/spec"}},
		{mod + "/internal/admit", []string{mod + "/spec"}},
		{mod + "/pass/rosterguard", []string{mod + "/spec"}},
	} {
		t.Run(strings.TrimPrefix(tc.pkg, mod+"/"), func(t *testing.T) {
			p, ok := pkgs[tc.pkg]
			if !ok {
				t.Fatalf("%s not listed", tc.pkg)
			}
			for _, d := range p.Deps {
				if !Standard(d) && !slices.Contains(tc.allow, d) {
					t.Errorf("%s depends on %s; it may depend on the standard library only (and %v)", tc.pkg, d, tc.allow)
				}
			}
		})
	}
}

// TestOnlyThePodmanAdapterImportsPodman: one package, reconcile/podman,
// imports the podman bindings (tests included), so that nothing else needs
// podman's build tags.
func TestOnlyThePodmanAdapterImportsPodman(t *testing.T) {
	mod, pkgs := List(t, "./...")
	adapter := mod + "/reconcile/podman"
	if !slices.ContainsFunc(pkgs[adapter].Imports, isPodman) {
		t.Fatalf("%s imports no podman binding: is the adapter elsewhere now? %v", adapter, pkgs[adapter].Imports)
	}
	for path, p := range pkgs {
		if path == adapter {
			continue
		}
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if isPodman(imp) {
				t.Errorf("%s imports %s; only %s may", path, imp, adapter)
			}
		}
	}
}

// TestResolverNeedsNoPodman: the resolver, and the binary that runs it
// alone, depend on no podman code: not the adapter, not the bindings.
func TestResolverNeedsNoPodman(t *testing.T) {
	mod, pkgs := List(t, "./resolver", "./cmd/meshhost-resolver")
	for path, p := range pkgs {
		for _, d := range p.Deps {
			if d == mod+"/reconcile/podman" || isPodman(d) {
				t.Errorf("%s depends on %s", path, d)
			}
		}
	}
}

// TestReconcileImportsItsChoicesOnly: of this module, the reconciler
// depends on spec and digest alone, and on no internal package (which its
// callers outside the module could not provide).
func TestReconcileImportsItsChoicesOnly(t *testing.T) {
	mod, pkgs := List(t, "./reconcile")
	for _, d := range pkgs[mod+"/reconcile"].Deps {
		if strings.HasPrefix(d, mod+"/") && d != mod+"/spec" && d != mod+"/digest" {
			t.Errorf("reconcile depends on %s; of this module it may depend on spec and digest only", d)
		}
	}
}

// TestPassImportsItsChoicesOnly: of this module, the pass pipeline
// depends on the vocabulary (spec, digest), the reconciler's plan, the
// admission rule and its roster guard alone: not on the agent, the
// migrations (it takes a Gate) or a runtime, so that a host agent outside
// the module composes a pass from what it chose.
func TestPassImportsItsChoicesOnly(t *testing.T) {
	mod, pkgs := List(t, "./pass")
	allow := []string{mod + "/spec", mod + "/digest", mod + "/reconcile", mod + "/internal/admit", mod + "/pass/rosterguard"}
	for _, d := range pkgs[mod+"/pass"].Deps {
		if strings.HasPrefix(d, mod+"/") && !slices.Contains(allow, d) {
			t.Errorf("pass depends on %s; of this module it may depend on %v only", d, allow)
		}
	}
}

// TestTestkitInTestsOnly: internal/testkit's fixtures are imported by
// tests, never by the product.
func TestTestkitInTestsOnly(t *testing.T) {
	mod, pkgs := List(t, "./...")
	kit := mod + "/internal/testkit/"
	for path, p := range pkgs {
		if strings.HasPrefix(path, kit) {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, kit) {
				t.Errorf("%s (not a test) imports the test fixture %s", path, imp)
			}
		}
	}
}

// TestNoPublicAPIExposesInternal: a package outside internal/ never names
// an internal type in its exported API; a caller outside the module could
// not provide or use it (as reconcile.Config.Journal *journal.Journal once
// could not be set).
func TestNoPublicAPIExposesInternal(t *testing.T) {
	_, pkgs := List(t, "./...")
	checked := 0
	for path, p := range pkgs {
		if Internal(path) || p.Name == "main" {
			continue
		}
		checked++
		found, err := ExposedInternal(p.Dir, p.GoFiles)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, f := range found {
			t.Errorf("%s exposes an internal type: %s", path, f)
		}
	}
	if checked < 8 {
		t.Errorf("checked %d public packages; expected spec, spec/specjson, digest, resolver, reconcile and its runtimes, migrations, pass", checked)
	}
}

// TestExposedInternalFindsIt checks the checker on sources that do and do
// not expose an internal type.
func TestExposedInternalFindsIt(t *testing.T) {
	const header = "package p\nimport (\n\tj \"example.com/m/internal/journal\"\n\t\"example.com/m/internal/yield\"\n)\n"
	for _, tc := range []struct {
		name, src string
		exposed   bool
	}{
		{"config field", "type Config struct{ Journal *j.Journal }", true},
		{"embedded field", "type Config struct{ *j.Journal }", true},
		{"result", "func Open() (*j.Journal, error) { return nil, nil }", true},
		{"method parameter", "type T struct{}\nfunc (T) Use(y *yield.Yielder) {}", true},
		{"interface method", "type I interface{ Journal() j.Journal }", true},
		{"variable's value", "var Default = j.New()", true},
		{"unexported field", "type Config struct{ journal *j.Journal }", false},
		{"unexported function", "func open() *j.Journal { return nil }", false},
		{"method of an unexported type", "type t struct{}\nfunc (t) Use(y *yield.Yielder) {}", false},
		{"function body", "func Run() { var y yield.Yielder; y.Maybe() }", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := exposedInFile(token.NewFileSet(), "p.go", []byte(header+tc.src+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(found) > 0; got != tc.exposed {
				t.Errorf("exposed = %t (%v), want %t for:\n%s", got, found, tc.exposed, tc.src)
			}
		})
	}
}

// TestDocsListEveryPackage: the layout tables of docs/development.md name
// every package of the module, each on one line of its own, and no package
// that is not there (but the modules of their own beside it: tools,
// examples/hostagent, each a directory with a go.mod): a newcomer meets none
// the docs do not mention.
func TestDocsListEveryPackage(t *testing.T) {
	mod, pkgs := List(t, "./...")
	root := filepath.Dir(pkgs[mod+"/spec"].Dir)
	const doc = "docs/development.md"
	data, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(data), "\n## Layout\n")
	if !ok {
		t.Fatalf(`%s has no "## Layout" section`, doc)
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	rows := map[string]int{} // the first cell of each table row, by its name
	for _, line := range strings.Split(layout, "\n") {
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			if name, _, ok = strings.Cut(name, "` |"); ok {
				rows[name]++
			}
		}
	}
	for path := range pkgs {
		rel := strings.TrimPrefix(path, mod+"/")
		switch n := rows[rel]; {
		case n == 0:
			t.Errorf("%s's layout does not list %s", doc, rel)
		case n > 1:
			t.Errorf("%s's layout lists %s %d times", doc, rel, n)
		}
	}
	for name := range rows {
		if _, ok := pkgs[mod+"/"+name]; !ok && !ownModule(root, name) {
			t.Errorf("%s's layout lists %s, which is not a package of %s", doc, name, mod)
		}
	}
}

// ownModule reports whether name, a directory under root, is a module of
// its own (it has a go.mod): not a package of this one.
func ownModule(root, name string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(name), "go.mod"))
	return err == nil
}

// ownAssertion names, by package, the package's own copy of
// syncs.AssertLocked, for a package that may not import internal ones: its
// ...Locked functions call that instead. Keep it short.
var ownAssertion = map[string]string{
	// reconcile imports spec, digest and the standard library only
	// (TestReconcileImportsItsChoicesOnly).
	"reconcile": "assertLocked",
}

// TestLockedFunctionsAssertTheLock: every function whose name ends in
// Locked (the caller holds the lock) asserts it first thing
// (syncs.AssertLocked), so that a call without the lock panics in tests
// instead of racing silently, as tailscale's syncs.AssertLocked does. A
// function that needs no lock is not named ...Locked.
func TestLockedFunctionsAssertTheLock(t *testing.T) {
	mod, pkgs := List(t, "./...")
	for path, p := range pkgs {
		found, err := LockedWithoutAssertion(p.Dir, p.GoFiles, ownAssertion[strings.TrimPrefix(path, mod+"/")])
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, f := range found {
			t.Errorf("%s: %s ends in Locked but does not begin with syncs.AssertLocked (or needs no lock: rename it)", path, f)
		}
	}
	for pkg, own := range ownAssertion {
		if _, ok := pkgs[mod+"/"+pkg]; !ok {
			t.Errorf("ownAssertion names %s (%s), which is not a package of %s", pkg, own, mod)
		}
	}
}

// TestLockedWithoutAssertionFindsThem checks the checker on sources that
// do and do not assert their lock.
func TestLockedWithoutAssertionFindsThem(t *testing.T) {
	const header = "package p\nimport (\n\t\"sync\"\n\tsy \"example.com/m/internal/plumbing/syncs\"\n)\ntype T struct{ mu sync.Mutex }\n"
	for _, tc := range []struct {
		name, src, own string
		found          bool
	}{
		{name: "asserts", src: "func (t *T) putLocked() { sy.AssertLocked(&t.mu); t.mu = sync.Mutex{} }"},
		{name: "function", src: "func drainLocked(t *T) { sy.AssertLocked(&t.mu) }"},
		{name: "no assertion", src: "func (t *T) putLocked() { _ = t }", found: true},
		{name: "empty", src: "func (t *T) putLocked() {}", found: true},
		{name: "asserted late", src: "func (t *T) putLocked() { _ = t; sy.AssertLocked(&t.mu) }", found: true},
		{name: "in a closure only", src: "func (t *T) putLocked() { func() { sy.AssertLocked(&t.mu) }() }", found: true},
		{name: "another package's AssertLocked", src: "func (t *T) putLocked() { sync.AssertLocked(&t.mu) }", found: true},
		{name: "its own copy", src: "func (t *T) putLocked() { assertLocked(&t.mu) }\nfunc assertLocked(m *sync.Mutex) {}", own: "assertLocked"},
		{name: "an own copy not allowed", src: "func (t *T) putLocked() { assertLocked(&t.mu) }\nfunc assertLocked(m *sync.Mutex) {}", found: true},
		{name: "not a Locked name", src: "func (t *T) Lock() {}\nfunc (t *T) unlocked() {}\nfunc Locked() bool { return true }"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := lockedInFile(token.NewFileSet(), "p.go", []byte(header+tc.src+"\n"), tc.own)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(found) > 0; got != tc.found {
				t.Errorf("found = %t (%v), want %t for:\n%s", got, found, tc.found, tc.src)
			}
		})
	}
}

// Function size limits of the agent's side (cmd/, internal/agent and the
// pass it computes, tests excluded): issue #26's "a newcomer can read it in a day".
const (
	maxFuncLines      = 100
	maxFuncComplexity = 40 // gocognit's cognitive complexity
)

// oversizedAllowed names the functions still over the limits, each with
// who removes it; the list only shrinks.
var oversizedAllowed = map[string]string{}

// TestFunctionsReadable: no function in cmd/, internal/agent or pass
// (tests excluded) is longer than maxFuncLines or of a cognitive complexity over
// maxFuncComplexity: setup in phases, each a function a newcomer reads at
// once (tailscaled's main is 143 lines and 51).
func TestFunctionsReadable(t *testing.T) {
	mod, pkgs := List(t, "./cmd/...", "./internal/agent/...", "./pass/...")
	stale := maps.Clone(oversizedAllowed)
	for path, p := range pkgs {
		rel := strings.TrimPrefix(path, mod+"/")
		found, err := OversizedFuncs(p.Dir, p.GoFiles, maxFuncLines, maxFuncComplexity)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, f := range found {
			delete(stale, rel+"."+f.Name)
			if who, ok := oversizedAllowed[rel+"."+f.Name]; ok {
				t.Logf("%s: %s (allowed until %s)", rel, f, who)
				continue
			}
			t.Errorf("%s: %s; the limits are %d lines and %d: split it into phases, each a function", rel, f, maxFuncLines, maxFuncComplexity)
		}
	}
	for name := range stale {
		t.Errorf("oversizedAllowed names %s, which is within the limits now (or gone): take it off the list", name)
	}
}

// TestOversizedFuncsMeasures checks the measure on functions of known
// size and cognitive complexity (the scores of gocognit's own examples).
func TestOversizedFuncsMeasures(t *testing.T) {
	for _, tc := range []struct {
		name, src  string
		lines, cog int
	}{
		{"straight", "func f() int {\n\treturn 1\n}", 3, 0},
		{"if else", "func f(x int) int {\n\tif x > 0 {\n\t\treturn 1\n\t} else {\n\t\treturn 2\n\t}\n}", 7, 2},
		// gocognit's README: SumOfPrimes scores 7.
		{"sum of primes", "func f(max int) int {\n\ttotal := 0\nOUT:\n\tfor i := 1; i < max; i++ {\n\t\tfor j := 2; j < i; j++ {\n\t\t\tif i%j == 0 {\n\t\t\t\tcontinue OUT\n\t\t\t}\n\t\t}\n\t\ttotal += i\n\t}\n\treturn total\n}", 13, 7},
		// and GetWords, a switch, 1.
		{"switch", "func f(n int) string {\n\tswitch n {\n\tcase 1:\n\t\treturn \"one\"\n\tdefault:\n\t\treturn \"lots\"\n\t}\n}", 8, 1},
		{"logical operators", "func f(a, b, c, d bool) bool {\n\treturn a && b || c && d\n}", 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "package p\n" + tc.src + "\n"
			all, err := oversizedInFile(token.NewFileSet(), "p.go", []byte(src), 0, -1)
			if err != nil || len(all) != 1 {
				t.Fatalf("oversizedInFile = %v, %v; want the one function", all, err)
			}
			if all[0].Lines != tc.lines || all[0].Complexity != tc.cog {
				t.Errorf("%s: %d lines, complexity %d; want %d and %d", tc.name, all[0].Lines, all[0].Complexity, tc.lines, tc.cog)
			}
			if none, _ := oversizedInFile(token.NewFileSet(), "p.go", []byte(src), tc.lines, tc.cog); len(none) != 0 {
				t.Errorf("at the limits exactly, reported %v", none)
			}
		})
	}
}
