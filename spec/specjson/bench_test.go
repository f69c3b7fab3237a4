package specjson_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec/specjson"
)

// declaration100k is a declaration of two containers with a roster of
// 100,000 names, the size of a large mesh.
func declaration100k() []byte {
	var b strings.Builder
	b.WriteString(`{"schema": 1, "machine": "novox", "generation": 1, "mesh_names": "auto", "roster": {"generation": 1, "zones": ["mesh.internal"], "names": {`)
	for i := range 100000 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"svc%d.node%d.mesh.internal": ["10.%d.%d.%d"]`, i, i%50, i>>16, i>>8&255, i&255)
	}
	b.WriteString(`}}, "containers": [{"name": "a", "image": "localhost/a:1"}, {"name": "b", "image": "localhost/b:1", "depends_on": ["a"]}]}`)
	return []byte(b.String())
}

// BenchmarkParseDeclaration100k compares ParseDeclaration (which reads the
// roster with the fast reader) with the strict reader alone.
func BenchmarkParseDeclaration100k(b *testing.B) {
	data := declaration100k()
	b.Run("ParseDeclaration", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := specjson.ParseDeclaration(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := specjson.ParseDeclarationStrict(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
