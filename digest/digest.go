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
//
// The record label (Key.Record) of a version changes without a new version
// as long as every meshhost that knows the version reads both forms:
//
//	v1 records, first form: the canonical document, env and label values
//	    in clear.
//	v1 records, keyed (issue #22): env and label values replaced by their
//	    keyed hashes (HMAC-SHA256 with the machine's Key, in hex), and the
//	    key named by recordKeyLabel among the labels. A container with a
//	    record of the first form keeps it, and is judged by its digest,
//	    until it is replaced for another reason.
const Current = "v1"

// Label names under which a managed container carries its digest and its
// record (the canonical settings, env and label values as keyed hashes, for
// Key.ExplainRecord without an inspect).
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
	// record and parseRecord write and read the record label.
	record      func(*Key, spec.Rendered) string
	parseRecord func(string) (parsed, error)
}

// parsed is a record label read back.
type parsed struct {
	r spec.Rendered
	// key is the id of the Key its env and label values are hashed with,
	// and "" for a record of the first form, which holds the values.
	key string
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

// Record returns the record label of r in the current version: the
// canonical settings, including those updated in place, so that
// ExplainRecord can name what changed from the labels of one List call. The
// values of env and labels are in it as their keyed hashes, never as
// values: labels are copied into podman's event log (the journal, on a
// systemd host), which more than root may read.
func (k *Key) Record(r spec.Rendered) string { return versions[Current].record(k, r) }

// ParseRecord reads a record label back into the settings it was made from.
// The Env and Labels of a keyed record (Key.Record) map each key to the
// keyed hash of its value, not to the value.
func ParseRecord(label string) (spec.Rendered, error) {
	p, err := parseRecord(label)
	return p.r, err
}

func parseRecord(label string) (parsed, error) {
	v, err := VersionOf(label)
	if err != nil {
		return parsed{}, err
	}
	return versions[v].parseRecord(label)
}
