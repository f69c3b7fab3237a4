package flagfile

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// list is a repeatable flag, as netflag's: each Set appends its comma list.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, strings.Split(v, ",")...); return nil }

type flags struct {
	fs       *flag.FlagSet
	state    *string
	budget   *int
	window   *time.Duration
	ratio    *float64
	verbose  *bool
	listen   list
	config   *string
	bigCount *uint64
}

func newFlags() *flags {
	f := &flags{fs: flag.NewFlagSet("test", flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.state = f.fs.String("state", "/var/lib/meshhost", "")
	f.budget = f.fs.Int("budget", 3, "")
	f.window = f.fs.Duration("budget-window", time.Minute, "")
	f.ratio = f.fs.Float64("ratio", 0.25, "")
	f.verbose = f.fs.Bool("verbose", false, "")
	f.fs.Var(&f.listen, "listen", "")
	f.config = f.fs.String("config", "", "")
	f.bigCount = f.fs.Uint64("big-count", 0, "")
	return f
}

func TestApply(t *testing.T) {
	f := newFlags()
	if err := f.fs.Parse([]string{"--budget", "5", "--config", "agent.toml"}); err != nil {
		t.Fatal(err)
	}
	doc := `# a comment
state = "/srv/meshhost"
budget = 9                 # the command line's 5 wins
budget-window = "2m"
"ratio" = 1
verbose = true
listen = ["127.0.0.1:53", "[::1]:53"]
big-count = 7
`
	keys, err := ApplyData(f.fs, "agent.toml", []byte(doc), nil, "config")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"big-count", "budget-window", "listen", "ratio", "state", "verbose"}, keys); diff != "" {
		t.Errorf("keys applied (-want +got):\n%s", diff)
	}
	got := []any{*f.state, *f.budget, *f.window, *f.ratio, *f.verbose, []string(f.listen), *f.bigCount}
	want := []any{"/srv/meshhost", 5, 2 * time.Minute, 1.0, true, []string{"127.0.0.1:53", "[::1]:53"}, uint64(7)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flags after the file (-want +got):\n%s", diff)
	}
}

func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown key", "state = \"/x\"\nbudgett = 4\n", `agent.toml:2: budgett: unknown key: no flag --budgett (did you mean budget?)`},
		{"unknown, nothing near", "colour = \"red\"\n", `agent.toml:1: colour: unknown key: no flag --colour`},
		{"the file's own flag", "config = \"/etc/other.toml\"\n", `agent.toml:1: config: unknown key: no flag --config`},
		{"a table", "[resolver]\nlisten = []\n", `agent.toml:1: resolver: is a table; keys are the flags' names, at the top level`},
		{"integer as a string", "budget = \"3\"\n", `agent.toml:1: budget: is "3", want an integer`},
		{"duration as a number", "budget-window = 60\n", `agent.toml:1: budget-window: is 60, want a duration as a string, e.g. "30s" or "2m"`},
		{"a bad duration", "budget-window = \"6o s\"\n", `agent.toml:1: budget-window: "6o s" is not a duration (write e.g. "30s" or "2m")`},
		{"bool as a string", "verbose = \"yes\"\n", `agent.toml:1: verbose: is "yes", want true or false`},
		{"list of numbers", "listen = [53]\n", `agent.toml:1: listen: element 0 is 53, want a string`},
		{"a list for one value", "state = [\"/a\", \"/b\"]\n", `agent.toml:1: state: is an array, want a string`},
		{"negative for unsigned", "big-count = -1\n", `agent.toml:1: big-count: invalid value "-1": parse error`},
		{"not TOML", "state = \n", `agent.toml:1: expected value but found '\n' instead`},
		{"a key twice", "budget = 1\nbudget = 2\n", `agent.toml:2: Key 'budget' has already been defined.`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFlags()
			f.fs.Parse(nil)
			_, err := ApplyData(f.fs, "agent.toml", []byte(tc.doc), nil, "config")
			if err == nil || err.Error() != tc.want {
				t.Errorf("ApplyData(%q) = %v,\nwant %s", tc.doc, err, tc.want)
			}
			var fe *Error
			if err != nil && !errors.As(err, &fe) {
				t.Errorf("%v is not an *Error", err)
			}
		})
	}
}

// TestEveryFault: all of a file's faults are reported at once, in the
// file's order, and nothing is set.
func TestEveryFault(t *testing.T) {
	f := newFlags()
	f.fs.Parse(nil)
	_, err := ApplyData(f.fs, "agent.toml", []byte("state = \"/srv\"\nbudgett = 1\nverbose = 1\n"), nil, "config")
	want := "agent.toml:2: budgett: unknown key: no flag --budgett (did you mean budget?)\nagent.toml:3: verbose: is 1, want true or false"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want\n%s", err, want)
	}
	if *f.state != "/var/lib/meshhost" {
		t.Errorf("state = %q after a faulty file, want the default", *f.state)
	}
	if !errors.Is(err, ErrUnknownKey) {
		t.Errorf("errors.Is(%v, ErrUnknownKey) = false", err)
	}
}

func FuzzApplyData(f *testing.F) {
	f.Add("state = \"/srv\"\nbudget = 4\nlisten = [\"a\"]\n")
	f.Add("[t]\nx = 1\n")
	f.Add("budget-window = \"1m\"\nverbose = true\n")
	f.Fuzz(func(t *testing.T, doc string) {
		fl := newFlags()
		fl.fs.Parse(nil)
		keys, err := ApplyData(fl.fs, "f.toml", []byte(doc), nil, "config")
		if err != nil && keys != nil {
			t.Fatalf("keys %v with an error %v", keys, err)
		}
	})
}

// A flag set parsed by another parser (pflag's, under cobra) sets values
// behind the Go flag set's back, so fs.Visit sees none: the caller's given
// set must still win over the file.
func TestApplyGivenByAnotherParser(t *testing.T) {
	f := newFlags()
	if err := f.fs.Lookup("budget").Value.Set("5"); err != nil { // as pflag does
		t.Fatal(err)
	}
	keys, err := ApplyData(f.fs, "agent.toml", []byte("budget = 9\nstate = \"/srv\"\n"), map[string]bool{"budget": true}, "config")
	if err != nil {
		t.Fatal(err)
	}
	if *f.budget != 5 || *f.state != "/srv" {
		t.Errorf("budget, state = %d, %q; want 5 (given), /srv (the file's)", *f.budget, *f.state)
	}
	if diff := cmp.Diff([]string{"state"}, keys); diff != "" {
		t.Errorf("keys applied (-want +got):\n%s", diff)
	}
}

// TestReadAppliesTheSoundKeys: Read, for a command that checks everything
// before it stops, sets the sound keys of a faulty file and reports every
// fault, the refused values' among them.
func TestReadAppliesTheSoundKeys(t *testing.T) {
	f := newFlags()
	f.fs.Parse(nil)
	vals, err := Read(f.fs, "agent.toml", []byte("state = \"/srv\"\nbudgett = 1\nbudget-window = \"x\"\nbudget = 5\n"), nil, "config")
	want := "agent.toml:2: budgett: unknown key: no flag --budgett (did you mean budget?)\nagent.toml:3: budget-window: \"x\" is not a duration (write e.g. \"30s\" or \"2m\")"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want\n%s", err, want)
	}
	if *f.state != "/srv" || *f.budget != 5 {
		t.Errorf("state, budget = %q, %d; want the file's /srv and 5", *f.state, *f.budget)
	}
	if diff := cmp.Diff([]Value{{Key: "state", Line: 1, Strings: []string{"/srv"}}, {Key: "budget", Line: 4, Strings: []string{"5"}}}, vals); diff != "" {
		t.Errorf("values applied (-want +got):\n%s", diff)
	}
}
