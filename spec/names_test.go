package spec_test

import (
	"strings"
	"testing"

	"github.com/meshhost/meshhost/spec"
)

func TestCheckNameLength(t *testing.T) {
	label := strings.Repeat("a", 63)
	name := strings.Join([]string{label, label, label, strings.Repeat("b", 61)}, ".") // 253
	if err := spec.CheckName(name); err != nil {
		t.Errorf("CheckName(253 chars) = %v, want nil", err)
	}
	if err := spec.CheckName(name + "b"); err == nil {
		t.Errorf("CheckName(254 chars) = nil, want an error")
	}
}
