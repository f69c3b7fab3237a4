package digest

import (
	"cmp"
	"crypto/hmac"
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
//	    cap_drop, hosts, dns); fields at their default are omitted. The
//	    digest is an unkeyed SHA-256 ("v1:sha256:<hex>", Of): with every
//	    other field readable in the record label, a low-entropy env or
//	    label value can be guessed and checked against it offline.
//	v2 (issue #22): the v1 canonical document, keyed: HMAC-SHA256 with the
//	    machine's Key ("v2:hmac-sha256:<key id>:<hex>", Key.Of), which
//	    only the key's holder can check a guess against. Its record is the
//	    keyed v1 record under the prefix "v2:". A container labelled v1 is
//	    still judged by v1 (an upgrade replaces nothing); one labelled v2
//	    with another key cannot be judged by its digest (Key.Judges:
//	    ErrOtherKey), and the reconciler compares it field by field.
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
const Current = "v2"

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
	// keyed: the digest is HMAC-SHA256 of canonical with the machine's Key
	// (Key.Of), not its SHA-256 (Of).
	keyed bool
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
	"v2": {canonical: canonicalV1, represents: func(spec.Rendered) bool { return true }, keyed: true, record: recordV2, parseRecord: parseRecordV2},
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

// Of returns the v1 digest of r, "v1:sha256:9f86d0...": an unkeyed SHA-256
// of its canonical settings, env and label values included, which anyone who
// reads the other fields can check a guessed value against. It is what
// containers created before v2 carry, and what judges them (Matches); new
// containers carry Key.Of.
func Of(r spec.Rendered) string { return of("v1", r) }

// of returns the unkeyed digest of r in version v.
func of(v string, r spec.Rendered) string {
	sum := sha256.Sum256(versions[v].canonical(r))
	return v + ":sha256:" + hex.EncodeToString(sum[:])
}

// keyedScheme prefixes the key id and the hash of a keyed digest.
const keyedScheme = "hmac-sha256:"

// Of returns the current digest of r, keyed with k: "v2:hmac-sha256:<key
// id>:<hex>", the label new containers carry.
func (k *Key) Of(r spec.Rendered) string { return k.of(Current, r) }

// of returns the keyed digest of r in version v. The canonical document is
// hashed after a tag naming the version, so that it never hashes like a
// value (Key.sum) that happens to equal it.
func (k *Key) of(v string, r spec.Rendered) string {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte("io.meshhost digest " + v + "\x00"))
	m.Write(versions[v].canonical(r))
	return v + ":" + keyedScheme + k.id + ":" + hex.EncodeToString(m.Sum(nil))
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

// Matches reports whether a container labelled with the unkeyed digest
// label (v1: Of) was created with the settings of desired, judged by the
// label's own version. It never compares against the current version's
// string: a container created under an older version that still matches is
// left alone. An unknown version returns ErrUnsupportedVersion; a keyed one
// (v2) needs the machine's key: Key.Matches.
func Matches(label string, desired spec.Rendered) (bool, error) {
	v, err := VersionOf(label)
	if err != nil {
		return false, err
	}
	if versions[v].keyed {
		return false, fmt.Errorf("digest version %q is keyed: judge it with the machine's key (digest.Key.Matches)", v)
	}
	if !versions[v].represents(desired) {
		return false, nil
	}
	return of(v, desired) == label, nil
}

// Judges reports whether k.Matches can judge a container labelled with the
// digest label: nil for an unkeyed digest of a known version (v1) and for a
// keyed one made with k; ErrUnsupportedVersion for an unknown version;
// ErrOtherKey for one keyed with another key (the machine's key was made
// anew since the container was created), which cannot tell whether the
// settings changed.
func (k *Key) Judges(label string) error {
	v, err := VersionOf(label)
	if err != nil || !versions[v].keyed {
		return err
	}
	id, _, err := keyedParts(v, label)
	if err != nil {
		return err
	}
	if id != k.id {
		return fmt.Errorf("the digest was %w (key %s; this machine's is %s): was the state directory's hash.key made anew?", ErrOtherKey, id, k.id)
	}
	return nil
}

// keyedParts splits a keyed digest label of version v into its key id and
// hash.
func keyedParts(v, label string) (id, sum string, err error) {
	rest, _ := strings.CutPrefix(label, v+":")
	rest, ok := strings.CutPrefix(rest, keyedScheme)
	if ok {
		id, sum, ok = strings.Cut(rest, ":")
	}
	if !ok || id == "" || len(sum) != 2*sha256.Size {
		return "", "", fmt.Errorf("digest label of version %s: want %s:%s<key id>:<%d hex digits>", v, v, keyedScheme, 2*sha256.Size)
	}
	return id, sum, nil
}

// Matches is the package's Matches for every version: a keyed digest is
// judged with k. A digest keyed with another key returns ErrOtherKey (see
// Judges): whether the settings changed is unknown, not false.
func (k *Key) Matches(label string, desired spec.Rendered) (bool, error) {
	if err := k.Judges(label); err != nil {
		return false, err
	}
	v, _ := VersionOf(label)
	if !versions[v].keyed {
		return Matches(label, desired)
	}
	if !versions[v].represents(desired) {
		return false, nil
	}
	return hmac.Equal([]byte(k.of(v, desired)), []byte(label)), nil
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
