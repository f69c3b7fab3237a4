package spec

import (
	"fmt"
	"strings"
)

// MaxNameLength is the longest DNS name in presentation form without the
// trailing dot (RFC 1035 section 2.3.4 leaves 253 characters).
const MaxNameLength = 253

// CanonicalName lowercases a DNS name and strips one trailing dot. It does not
// validate; use CheckName for that.
func CanonicalName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// CheckName reports why name is not an RFC 1123 host name, or nil when it is
// one. Only letters, digits, hyphens and dots pass, which is also what keeps a
// name from injecting a line (or a comment) into a container's /etc/hosts.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("is empty")
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("is %d characters long, more than %d", len(name), MaxNameLength)
	}
	i := 0
	for label := range strings.SplitSeq(name, ".") { // no slice: runs per name per swap
		i++
		if err := checkLabel(label); err != nil {
			return fmt.Errorf("%q: label %d %w", name, i, err)
		}
	}
	return nil
}

func checkLabel(label string) error {
	switch {
	case label == "":
		return fmt.Errorf("is empty (two dots in a row, or a leading dot)")
	case len(label) > 63:
		return fmt.Errorf("is %d characters long, more than 63", len(label))
	case label[0] == '-' || label[len(label)-1] == '-':
		return fmt.Errorf("%q starts or ends with a hyphen", label)
	}
	for _, c := range []byte(label) {
		if !isNameByte(c) {
			return fmt.Errorf("%q has %q; only letters, digits and hyphens are allowed", label, c)
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// InZone reports whether name is zone or below it. Both must be canonical.
func InZone(name, zone string) bool {
	return name == zone || strings.HasSuffix(name, "."+zone)
}
