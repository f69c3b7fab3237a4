package reconcile

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/spec"
)

// TestDeclaredCapabilitiesJudgedByWhatIsHeld: podman reports added and
// dropped capabilities against its own default set, which podman 5 shrank
// (no MKNOD, NET_RAW, AUDIT_WRITE). The reports below are podman's, for a
// container created with --cap-drop CHOWN,MKNOD --cap-add NET_ADMIN on
// each; adoption must find that container to match the declaration on
// both, and a container holding a dropped capability not to.
func TestDeclaredCapabilitiesJudgedByWhatIsHeld(t *testing.T) {
	want := caps([]string{"CAP_NET_ADMIN"}, []string{"CAP_CHOWN", "CAP_MKNOD"})
	held43 := []string{"CAP_AUDIT_WRITE", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT"}
	held5 := []string{"CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT"}
	for _, tc := range []struct {
		name             string
		ins              Inspected
		want             *spec.Rendered
		wantAdd, wantDrp []string
	}{
		{"podman 4.3", Inspected{Capabilities: held43, Settings: *caps([]string{"CAP_NET_ADMIN"}, []string{"CAP_CHOWN", "CAP_MKNOD"})},
			want, want.CapAdd, want.CapDrop},
		{"podman 5.4", Inspected{Capabilities: held5, Settings: *caps([]string{"CAP_NET_ADMIN"}, []string{"CAP_CHOWN"})},
			want, want.CapAdd, want.CapDrop},
		// Made without --cap-drop on podman 5: it holds CHOWN, which the
		// declaration drops.
		{"podman 5.4, CHOWN held", Inspected{Capabilities: append([]string{"CAP_CHOWN"}, held5...), Settings: *caps([]string{"CAP_NET_ADMIN"}, nil)},
			want, want.CapAdd, []string{"CAP_MKNOD"}},
		// A declared add of a default capability is not reported as added.
		{"add of a default", Inspected{Capabilities: held5, Settings: *caps(nil, nil)},
			caps([]string{"CAP_KILL"}, nil), []string{"CAP_KILL"}, nil},
		{"drop ALL", Inspected{Capabilities: []string{"CAP_NET_ADMIN"}, Settings: *caps([]string{"CAP_NET_ADMIN"}, []string{"CAP_DAC_OVERRIDE", "CAP_KILL"})},
			caps([]string{"CAP_NET_ADMIN"}, []string{"ALL"}), []string{"CAP_NET_ADMIN"}, []string{"ALL"}},
		{"drop ALL, KILL held", Inspected{Capabilities: []string{"CAP_KILL"}, Settings: *caps(nil, []string{"CAP_DAC_OVERRIDE"})},
			caps(nil, []string{"ALL"}), nil, []string{"CAP_DAC_OVERRIDE"}},
		// A runtime that does not say what is held: its report is taken as is.
		{"unknown", Inspected{Settings: *caps(nil, []string{"CAP_CHOWN"})}, want, nil, []string{"CAP_CHOWN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := declaredOnly(tc.ins, tc.want)
			if diff := cmp.Diff(tc.wantAdd, got.CapAdd); diff != "" {
				t.Errorf("cap_add (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDrp, got.CapDrop); diff != "" {
				t.Errorf("cap_drop (-want +got):\n%s", diff)
			}
		})
	}
}

func caps(add, drop []string) *spec.Rendered {
	var r spec.Rendered
	r.CapAdd, r.CapDrop = add, drop
	return &r
}
