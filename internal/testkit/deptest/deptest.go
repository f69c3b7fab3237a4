// Package deptest states the module's dependency rules as tests, in the
// spirit of tailscale's tstest/deptest: the leaves stay leaves, one package
// talks to podman, no public package hands out an internal type, every
// ...Locked function asserts its lock, no function of the agent's side is
// too long or too complex to read, docs/development.md's layout lists
// every package, and a host agent outside the module (examples/hostagent)
// builds from the public packages alone. The rules themselves are in rules_test.go; this file reads the
// module with `go list` and go/ast, and measures cognitive complexity
// with github.com/uudashr/gocognit.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/uudashr/gocognit"
)

// Package is one package as `go list -json` reports it.
type Package struct {
	ImportPath   string
	Name         string
	Dir          string
	GoFiles      []string
	Imports      []string // direct, of GoFiles
	TestImports  []string
	XTestImports []string
	Deps         []string // every package GoFiles need, transitively
}

// Standard reports whether path is in the standard library: its first
// element has no dot.
func Standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// Internal reports whether path is an internal package (of any module).
func Internal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/") || strings.HasPrefix(path, "internal/")
}

// List returns the packages matching patterns (e.g. "./..."), listed from
// the module's root with `go list -e -json`, by import path. GOFLAGS (the
// podman build tags) is taken from the environment.
func List(t testing.TB, patterns ...string) (module string, pkgs map[string]Package) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	mod, err := exec.Command(gobin, "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module = strings.TrimSpace(string(mod))
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-json"}, patterns...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", patterns, err, stderr.String())
	}
	pkgs = map[string]Package{}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list %v listed no package", patterns)
	}
	return module, pkgs
}

// ExposedInternal returns the exported API of the package in dir (its
// GoFiles) that names a type of an internal package: exported functions and
// methods of exported types (parameters and results), exported types (for
// structs, their exported and embedded fields; for interfaces, their
// methods), and exported variables and constants (their type, or when it
// is not written, anything their value names). Each entry reads
// "file.go:line: Name uses internal/pkg.Type". It reads the source only:
// function bodies and unexported declarations are not its business.
func ExposedInternal(dir string, files []string) ([]string, error) {
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		found, err := exposedInFile(fset, name, src)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// exposedInFile is ExposedInternal for one file's source.
func exposedInFile(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	internal := map[string]string{} // import name -> path, internal imports only
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !Internal(path) {
			continue
		}
		local := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		internal[local] = path
	}
	if len(internal) == 0 {
		return nil, nil
	}
	var out []string
	check := func(who string, n ast.Node) {
		if n == nil {
			return
		}
		ast.Inspect(n, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok {
				if path, ok := internal[id.Name]; ok {
					out = append(out, fmt.Sprintf("%s: %s uses %s.%s", fset.Position(sel.Pos()), who, path, sel.Sel.Name))
				}
			}
			return true
		})
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Recv != nil && !exportedReceiver(d.Recv) {
				continue
			}
			check(d.Name.Name, d.Type)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						checkType(s.Name.Name, s.Type, check)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if !n.IsExported() {
							continue
						}
						if s.Type != nil {
							check(n.Name, s.Type)
							continue
						}
						for _, v := range s.Values {
							check(n.Name, v)
						}
					}
				}
			}
		}
	}
	return out, nil
}

// checkType checks what of type expression t the package's users see.
func checkType(who string, t ast.Expr, check func(string, ast.Node)) {
	switch t := t.(type) {
	case *ast.StructType:
		for _, fld := range t.Fields.List {
			if len(fld.Names) == 0 { // embedded: its exported members are promoted
				check(who, fld.Type)
			}
			for _, n := range fld.Names {
				if n.IsExported() {
					check(who+"."+n.Name, fld.Type)
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			check(who, m.Type)
		}
	default:
		check(who, t)
	}
}

func exportedReceiver(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// syncsPath is the package of the assertion ...Locked functions make.
const syncsPath = "/internal/plumbing/syncs"

// LockedWithoutAssertion returns the functions of the package in dir (its
// GoFiles) whose names end in Locked, the house's "the caller holds the
// lock", and whose first statement is not a call of syncs.AssertLocked
// (internal/plumbing/syncs), or of the package's own copy named own (for
// a package that may not import internal ones; "" for none): each entry
// reads "file.go:line: name". The assertion functions themselves are not
// reported. A function that needs no lock should not say it does; one
// that does should check it.
func LockedWithoutAssertion(dir string, files []string, own string) ([]string, error) {
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		found, err := lockedInFile(fset, name, src, own)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// lockedInFile is LockedWithoutAssertion for one file's source.
func lockedInFile(fset *token.FileSet, name string, src []byte, own string) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	syncs := "" // the local name of the syncs package, if imported
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasSuffix(path, syncsPath) {
			syncs = "syncs"
			if imp.Name != nil {
				syncs = imp.Name.Name
			}
		}
	}
	var out []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		n := ""
		if ok {
			n = fn.Name.Name
		}
		if !ok || fn.Body == nil || !strings.HasSuffix(n, "Locked") || n == "Locked" || n == "AssertLocked" || n == own {
			continue
		}
		if len(fn.Body.List) == 0 || !isAssertion(fn.Body.List[0], syncs, own) {
			out = append(out, fmt.Sprintf("%s: %s", fset.Position(fn.Pos()), funcName(fn)))
		}
	}
	return out, nil
}

// isAssertion reports whether statement st calls syncs.AssertLocked
// (syncs: the package's local name, "" when not imported) or the
// package's own assertion, own.
func isAssertion(st ast.Stmt, syncs, own string) bool {
	es, ok := st.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	switch fun := call.Fun.(type) {
	case *ast.SelectorExpr:
		id, ok := fun.X.(*ast.Ident)
		return ok && syncs != "" && id.Name == syncs && fun.Sel.Name == "AssertLocked"
	case *ast.Ident:
		return own != "" && fun.Name == own
	}
	return false
}

// funcName is fn's name, with its receiver's type for a method
// ("(*Server).applyLocked").
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t, star := fn.Recv.List[0].Type, ""
	if s, ok := t.(*ast.StarExpr); ok {
		t, star = s.X, "*"
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return fmt.Sprintf("(%s%s).%s", star, id.Name, fn.Name.Name)
	}
	return fn.Name.Name
}

// Oversized is a function over a size limit: where it is, its name, its
// length in lines (from `func` to the closing brace) and its cognitive
// complexity (gocognit's).
type Oversized struct {
	Pos        string // file.go:line
	Name       string // as funcName gives it
	Lines      int
	Complexity int
}

func (o Oversized) String() string {
	return fmt.Sprintf("%s: %s: %d lines, cognitive complexity %d", o.Pos, o.Name, o.Lines, o.Complexity)
}

// OversizedFuncs returns the functions of files (in dir) longer than
// maxLines or of a cognitive complexity over maxComplexity, as
// github.com/uudashr/gocognit measures it (the metric of G. Ann
// Campbell's "Cognitive Complexity" white paper: +1 for each break in
// the linear flow, plus its nesting depth for those that nest).
func OversizedFuncs(dir string, files []string, maxLines, maxComplexity int) ([]Oversized, error) {
	fset := token.NewFileSet()
	var out []Oversized
	for _, name := range files {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		found, err := oversizedInFile(fset, name, src, maxLines, maxComplexity)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// oversizedInFile is OversizedFuncs for one file's source.
func oversizedInFile(fset *token.FileSet, name string, src []byte, maxLines, maxComplexity int) ([]Oversized, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []Oversized
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
		c := gocognit.Complexity(fn)
		if lines > maxLines || c > maxComplexity {
			out = append(out, Oversized{Pos: fset.Position(fn.Pos()).String(), Name: funcName(fn), Lines: lines, Complexity: c})
		}
	}
	return out, nil
}
