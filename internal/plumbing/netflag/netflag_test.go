package netflag

import (
	"flag"
	"io"
	"net/netip"
	"slices"
	"testing"
)

func TestForms(t *testing.T) {
	ap := netip.MustParseAddrPort
	pf := netip.MustParsePrefix
	tests := []struct {
		name    string
		args    []string
		listen  []netip.AddrPort
		up      []netip.AddrPort
		allow   []netip.Prefix
		wantErr bool
	}{
		{name: "repeated", args: []string{"--upstream", "192.0.2.1", "--upstream", "192.0.2.2:5353", "--allow", "10.0.0.0/8", "--allow", "192.0.2.7"},
			up: []netip.AddrPort{ap("192.0.2.1:53"), ap("192.0.2.2:5353")}, allow: []netip.Prefix{pf("10.0.0.0/8"), pf("192.0.2.7/32")}},
		{name: "commas", args: []string{"--upstream", "192.0.2.1, [2001:db8::1]:5353", "--allow", "10.1.2.3/8,2001:db8::7", "--listen", "127.0.0.1:53,127.0.0.2:53"},
			up: []netip.AddrPort{ap("192.0.2.1:53"), ap("[2001:db8::1]:5353")}, allow: []netip.Prefix{pf("10.0.0.0/8"), pf("2001:db8::7/128")},
			listen: []netip.AddrPort{ap("127.0.0.1:53"), ap("127.0.0.2:53")}},
		{name: "ipv6 upstream without port", args: []string{"--upstream", "2001:db8::53"}, up: []netip.AddrPort{ap("[2001:db8::53]:53")}},
		{name: "bad prefix", args: []string{"--allow", "10.0.0.0/99"}, wantErr: true},
		{name: "bad upstream", args: []string{"--upstream", "resolver.example"}, wantErr: true},
		{name: "listen needs a port", args: []string{"--listen", "127.0.0.1"}, wantErr: true},
		{name: "empty entry", args: []string{"--allow", "10.0.0.0/8,"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var listen AddrPorts
			var up Upstreams
			var allow Prefixes
			fs.Var(&listen, "listen", "")
			fs.Var(&up, "upstream", "")
			fs.Var(&allow, "allow", "")
			err := fs.Parse(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse(%q) = %v, want error %t", tc.args, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !slices.Equal(listen, tc.listen) || !slices.Equal(up, tc.up) || !slices.Equal(allow, tc.allow) {
				t.Errorf("Parse(%q) = listen %v, upstream %v, allow %v; want %v, %v, %v", tc.args, listen, up, allow, tc.listen, tc.up, tc.allow)
			}
		})
	}
}
