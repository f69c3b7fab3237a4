package netflag

import (
	"strings"
	"testing"
)

// TestLoopback: an address flag for the machine itself takes loopback
// addresses (and localhost), and another only with its remote flag; the
// refusal names both flags and a value to give.
func TestLoopback(t *testing.T) {
	l := Loopback{Flag: "--metrics", RemoteFlag: "--metrics-remote", Serves: "metrics", Example: "127.0.0.1:9470"}
	for _, tc := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:9470", false, true},
		{"127.8.9.10:9470", false, true},
		{"[::1]:9470", false, true},
		{"localhost:9470", false, true},
		{"0.0.0.0:9470", false, false},
		{"[::]:9470", false, false},
		{":9470", false, false}, // every address
		{"10.1.2.3:9470", false, false},
		{"[fd7a::1]:9470", false, false},
		{"example.org:9470", false, false},
		{"0.0.0.0:9470", true, true},
		{"10.1.2.3:9470", true, true},
		{"9470", false, false},
	} {
		err := l.Check(tc.addr, tc.remote)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%q, remote %t) = %v, want ok=%t", tc.addr, tc.remote, err, tc.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), tc.addr+":") && !strings.HasPrefix(err.Error(), `"`+tc.addr+`":`) {
			t.Errorf("Check(%q): %v does not start with the address (the caller names the flag)", tc.addr, err)
		}
		if err != nil && strings.Contains(err.Error(), "loopback") && !strings.Contains(err.Error(), "--metrics-remote") {
			t.Errorf("Check(%q): %v does not name --metrics-remote", tc.addr, err)
		}
	}
}
