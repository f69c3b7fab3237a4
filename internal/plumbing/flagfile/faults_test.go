package flagfile

import (
	"errors"
	"flag"
	"testing"
)

// TestFaultsOrder: a key the file set is named by file and line, any other by
// its flag; the file's faults come in its order, then the command line's.
func TestFaultsOrder(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("a", "", "")
	fs.String("b", "", "")
	fs.String("c", "", "")
	var f Faults
	f.Path = "x.toml"
	f.Read(Read(fs, "x.toml", []byte("b = \"1\"\nnope = 2\na = \"2\"\n"), nil))
	f.Add("c", errors.New("bad c"))
	f.Add("a", errors.New("bad a"))
	f.Add("b", errors.New("bad b"))
	want := "x.toml:1: b: bad b\nx.toml:2: nope: unknown key: no flag --nope\nx.toml:3: a: bad a\n--c: bad c"
	if err := f.Err(); err == nil || err.Error() != want {
		t.Errorf("faults:\n%v\nwant:\n%s", err, want)
	}
	if w := f.Where("a"); w != "x.toml:3: a" {
		t.Errorf("Where(a) = %q", w)
	}
	if w := f.Where("c"); w != "--c" {
		t.Errorf("Where(c) = %q", w)
	}
	if err := (&Faults{}).Err(); err != nil {
		t.Errorf("no faults: %v", err)
	}
}
