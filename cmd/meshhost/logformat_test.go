package main

import (
	"strings"
	"testing"
)

// TestAgentLogFlags: a --log-format or --log-level the agent does not know
// is a usage error naming the flag, before anything starts.
func TestAgentLogFlags(t *testing.T) {
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "loud"}} {
		all := append([]string{"agent", "--runtime", "memory", "--state", t.TempDir(), "--http", "off", "--push", "off"}, args...)
		code, _, stderr := runCLI(t, nil, all...)
		if code != exitConfig || !strings.Contains(stderr, args[0]) {
			t.Errorf("meshhost agent %s %s = exit %d, %q; want exit %d naming the flag", args[0], args[1], code, stderr, exitConfig)
		}
	}
}
