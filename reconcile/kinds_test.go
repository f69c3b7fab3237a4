package reconcile

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// TestKindsListsEveryKind reads action.go for the Kind constants: a Kind
// added there but not to kinds would have no pre-initialised metrics.
func TestKindsListsEveryKind(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "action.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []Kind
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Kind" {
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					t.Fatalf("a Kind constant is not a string literal: %T", v)
				}
				k, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				declared = append(declared, Kind(k))
			}
		}
		return true
	})
	if len(declared) == 0 {
		t.Fatal("found no Kind constants in action.go")
	}
	for _, k := range declared {
		if !slices.Contains(kinds, k) {
			t.Errorf("Kind %q is declared in action.go but missing from kinds", k)
		}
	}
	if len(kinds) != len(declared) {
		t.Errorf("kinds has %d entries, action.go declares %d Kinds", len(kinds), len(declared))
	}
}
