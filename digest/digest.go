package digest

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// Current is the digest version new containers are labelled with.
//
// History (keep every version's encoder: containers labelled with it may
// still run, and are judged by it):
//
//	v1: first version. Covers every spec.Replace field (name, image,
//	    command, entrypoint, env, working_dir, user, labels, ports, mounts,
//	    networks, restart, stop_signal, stop_timeout, healthcheck, cap_add,
//	    cap_drop, hosts, dns); fields at their default are omitted.
const Current = "v1"

// Label names under which a managed container carries its digest and its
// record (the full canonical settings, for Explain without an inspect).
const (
	LabelDigest = spec.LabelPrefix + "digest"
	LabelRecord = spec.LabelPrefix + "record"
)

// ErrUnsupportedVersion is returned for a digest or record whose version this
// meshhost does not know (written by a newer one). Callers fall back to
// comparing fields.
var ErrUnsupportedVersion = errors.New("unsupported digest version")

// version is one digest version: how it encodes the create-time fields, and
// whether a rendered container can be told apart from its defaults by it.
type version struct {
	// canonical returns the bytes hashed for the digest.
	canonical func(spec.Rendered) []byte
	// represents reports whether every setting of r this version does not
	// cover is at its default. If not, the version cannot vouch for r.
	represents func(spec.Rendered) bool
	// record and parseRecord write and read the full record label.
	record      func(spec.Rendered) string
	parseRecord func(string) (spec.Rendered, error)
}

// versions holds every version this meshhost understands. Only tests add to
// it (to simulate an upgrade); it is read-only otherwise.
var versions = map[string]version{
	"v1": {canonical: canonicalV1, represents: func(spec.Rendered) bool { return true }, record: recordV1, parseRecord: parseRecordV1},
}

// Versions lists the digest versions this meshhost understands, oldest first.
func Versions() []string {
	vs := make([]string, 0, len(versions))
	for v := range versions {
		vs = append(vs, v)
	}
	// "v10" sorts after "v9": compare by length first.
	slices.SortFunc(vs, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	return vs
}

// Of returns the current digest of r, e.g. "v1:sha256:9f86d0...".
func Of(r spec.Rendered) string { return of(Current, r) }

func of(v string, r spec.Rendered) string {
	sum := sha256.Sum256(versions[v].canonical(r))
	return v + ":sha256:" + hex.EncodeToString(sum[:])
}

// VersionOf returns the version prefix of a digest or record label.
func VersionOf(label string) (string, error) {
	v, _, ok := strings.Cut(label, ":")
	if !ok || v == "" {
		return "", fmt.Errorf("digest %q has no version prefix", label)
	}
	if _, known := versions[v]; !known {
		return v, fmt.Errorf("digest version %q: %w (this meshhost knows %s)", v, ErrUnsupportedVersion, strings.Join(Versions(), ", "))
	}
	return v, nil
}

// Matches reports whether a container labelled with digest label was created
// with the settings of desired, judged by the label's own version. It never
// compares against the current version's string: a container created under
// an older version that still matches is left alone. An unknown version
// returns ErrUnsupportedVersion.
func Matches(label string, desired spec.Rendered) (bool, error) {
	v, err := VersionOf(label)
	if err != nil {
		return false, err
	}
	if !versions[v].represents(desired) {
		return false, nil
	}
	return of(v, desired) == label, nil
}

// Record returns the record label of r in the current version: the full
// canonical settings, including those updated in place, so that Explain can
// name what changed from the labels of one List call.
func Record(r spec.Rendered) string { return versions[Current].record(r) }

// ParseRecord reads a record label back into the settings it was made from.
func ParseRecord(label string) (spec.Rendered, error) {
	v, err := VersionOf(label)
	if err != nil {
		return spec.Rendered{}, err
	}
	return versions[v].parseRecord(label)
}
