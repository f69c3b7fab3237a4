package incident

import (
	"testing"

	"github.com/meshhost/meshhost/spec"
)

func TestDeclarationsAreValid(t *testing.T) {
	m := New()
	check := func(step string) {
		for machine, d := range m.Declarations(spec.FlagOff) {
			if err := d.Validate(); err != nil {
				t.Errorf("%s: declaration of %s: %v", step, machine, err)
			}
		}
	}
	check("start")
	if n := len(m.Declarations(spec.FlagOff)["novox"].Containers); n < 40 || n > 50 {
		t.Errorf("novox runs %d containers, want about 45", n)
	}
	before := len(m.Roster().Names)
	for _, a := range Actions() {
		m.Push(a, spec.FlagOff)
		check(a.Name)
	}
	if after := len(m.Roster().Names); after != before+3 {
		t.Errorf("roster grew from %d to %d names, want +3 (zurag.be, searxng.zurag.be, searxng.ace.internal)", before, after)
	}
}
