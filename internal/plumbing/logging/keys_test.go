package logging

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// vagueKeys are log keys that do not say what they are about, with the
// keys to use instead (the package doc names them).
var vagueKeys = map[string]string{
	"generation": "roster_generation or declaration_generation",
}

// keyArgs says, for the logging calls by method name, where their
// key-value arguments start (the message, the context and the level come
// before them).
var keyArgs = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2,
	"Log":  3,
	"With": 0, "WithAttrs": 1,
}

// vagueKeysIn returns the logging calls of a file's source that use a
// vague key, each as "file:line: key "k": use ...".
func vagueKeysIn(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	check := func(e ast.Expr) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return
		}
		key, err := strconv.Unquote(lit.Value)
		if err != nil {
			return
		}
		if use, ok := vagueKeys[key]; ok {
			out = append(out, fmt.Sprintf("%s: log key %q: use %s", fset.Position(lit.Pos()), key, use))
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "slog" {
			// slog.String("k", v), slog.Any("k", v), slog.Group("k", ...)...
			if len(call.Args) > 0 {
				check(call.Args[0])
			}
			return true
		}
		if from, ok := keyArgs[sel.Sel.Name]; ok {
			for i := from; i < len(call.Args); i++ {
				check(call.Args[i])
			}
		}
		return true
	})
	return out, nil
}

// TestNoVagueKeys: no log line of the module's code says a bare
// "generation": an agent line may be about a declaration's or a roster's,
// and an operator grepping the journal for one must not find the other.
func TestNoVagueKeys(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root is not %s: %v", root, err)
	}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		found, err := vagueKeysIn(fset, rel, src)
		if err != nil {
			return err
		}
		for _, f := range found {
			t.Error(f)
		}
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("checked %d files under %s; expected the whole module", files, root)
	}
}

// TestVagueKeysFindsThem checks the checker.
func TestVagueKeysFindsThem(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		found     bool
	}{
		{"Info", `log.Info("roster applied", "generation", g)`, true},
		{"ErrorContext", `log.ErrorContext(ctx, "pass failed", "err", err, "generation", g)`, true},
		{"With", `log = log.With("generation", g)`, true},
		{"WithAttrs", `ctx = logging.WithAttrs(ctx, "generation", g)`, true},
		{"slog.Uint64", `log.Info("x", slog.Uint64("generation", g))`, true},
		{"roster_generation", `log.Info("roster applied", "roster_generation", g)`, false},
		{"the message", `log.Info("generation", "roster_generation", g)`, false},
		{"not a log call", `errs.add("generation", "must be greater than 0")`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "package p\nfunc f() {\n" + tc.src + "\n}\n"
			found, err := vagueKeysIn(token.NewFileSet(), "p.go", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(found) > 0; got != tc.found {
				t.Errorf("found = %t (%v), want %t for: %s", got, found, tc.found, tc.src)
			}
		})
	}
}
