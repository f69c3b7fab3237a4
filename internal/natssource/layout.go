package natssource

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/spec"
)

// ProtocolVersion is the version of the bucket layout and commit protocol
// this meshhost writes and the newest it reads (Commit.Version).
//
// History:
//
//	1: first version: one key per name ("n.<name>", a JSON list of
//	   addresses), a commit record ("commit") written last with
//	   compare-and-set, naming the generation, the last revision it
//	   covers, the number of names and their digest, and the zones; one
//	   key per machine in the machines bucket, a declaration without its
//	   roster.
const ProtocolVersion = 1

// DefaultPrefix names the buckets when no other prefix is given:
// "meshhost-roster" and "meshhost-machines".
const DefaultPrefix = "meshhost"

// CommitKey is the roster bucket's commit record.
const CommitKey = "commit"

// namePrefix starts the key of every roster name.
const namePrefix = "n."

// History is how many values the buckets keep per key. Two: a publisher
// writes each key at most once per change, so the value a commit covered
// survives until the next change is committed, and a watcher that starts
// while a change is half written still finds it (see the package doc).
const History = 2

// Layout names the two buckets.
type Layout struct {
	Roster   string // one key per mesh name, and the commit record
	Machines string // one key per machine: its declaration without the roster
}

// LayoutFor returns the layout whose buckets are prefix-roster and
// prefix-machines.
func LayoutFor(prefix string) Layout {
	return Layout{Roster: prefix + "-roster", Machines: prefix + "-machines"}
}

var bucketRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func (l Layout) validate() error {
	for _, b := range []string{l.Roster, l.Machines} {
		if !bucketRE.MatchString(b) {
			return fmt.Errorf("bucket name %q: want letters, digits, '-' and '_' only", b)
		}
	}
	if l.Roster == l.Machines {
		return fmt.Errorf("the roster and machines buckets are both %q", l.Roster)
	}
	return nil
}

// NameKey returns the roster bucket's key for a canonical mesh name.
func NameKey(name string) string { return namePrefix + name }

// Commit is the roster bucket's commit record: it puts a roster
// generation in force. It is written last, with compare-and-set on the
// revision of the record it replaces.
type Commit struct {
	Version    int    `json:"version"`
	Generation uint64 `json:"generation"`
	// Revision is the last revision of the roster bucket the commit
	// covers: for every name, its value is the newest one written at or
	// below Revision (a deleted name, or one never written, is absent).
	Revision uint64 `json:"revision"`
	// Names and Digest describe the committed roster: its number of
	// names, and the XOR of every name's digest (entryDigest), in hex. A
	// watcher applies a commit only when what it read adds up to both.
	Names  int      `json:"names"`
	Digest string   `json:"digest"`
	Zones  []string `json:"zones"`
}

// parseCommit reads a commit record strictly.
func parseCommit(data []byte) (Commit, error) {
	var c Commit
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Commit{}, fmt.Errorf("commit record: %w", err)
	}
	if dec.More() {
		return Commit{}, errors.New("commit record: data after the object")
	}
	switch {
	case c.Version < 1:
		return Commit{}, fmt.Errorf("commit record: version %d is not a version", c.Version)
	case c.Version > ProtocolVersion:
		return Commit{}, fmt.Errorf("commit record: version %d is newer than this meshhost reads (%d); upgrade meshhost", c.Version, ProtocolVersion)
	case c.Generation == 0:
		return Commit{}, errors.New("commit record: generation must be greater than 0")
	case c.Names < 0:
		return Commit{}, errors.New("commit record: names must not be negative")
	}
	if _, err := parseDigest(c.Digest); err != nil {
		return Commit{}, fmt.Errorf("commit record: %w", err)
	}
	r := &spec.Roster{Generation: c.Generation, Zones: c.Zones}
	if err := r.Validate(); err != nil {
		return Commit{}, fmt.Errorf("commit record: %w", err)
	}
	for _, z := range c.Zones {
		if z != spec.CanonicalName(z) {
			return Commit{}, fmt.Errorf("commit record: zone %q is not canonical (lowercase, no trailing dot)", z)
		}
	}
	return c, nil
}

// digest identifies a set of roster entries: the XOR of their
// entryDigests, so that a change of k names updates it in O(k).
type digest [16]byte

// entryDigest is the first 16 bytes of SHA-256 over the name, a zero byte
// and its sorted addresses joined by commas.
func entryDigest(name string, addrs []netip.Addr) digest {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	for i, a := range addrs {
		if i > 0 {
			h.Write([]byte{','})
		}
		b, _ := a.MarshalText()
		h.Write(b)
	}
	var sum [sha256.Size]byte
	var d digest
	copy(d[:], h.Sum(sum[:0]))
	return d
}

func (d *digest) toggle(x digest) {
	for i := range d {
		d[i] ^= x[i]
	}
}

func (d digest) String() string { return hex.EncodeToString(d[:]) }

func parseDigest(s string) (digest, error) {
	var d digest
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(d) {
		return d, fmt.Errorf("digest %q: want %d hex digits", s, 2*len(d))
	}
	copy(d[:], b)
	return d, nil
}

// rosterDigest is the digest of every name of names.
func rosterDigest(names map[string][]netip.Addr) digest {
	var d digest
	for name, addrs := range names {
		d.toggle(entryDigest(name, addrs))
	}
	return d
}

// encodeAddrs is a name key's value: its addresses as a JSON list.
func encodeAddrs(addrs []netip.Addr) []byte {
	b := make([]byte, 0, 2+len(addrs)*18)
	b = append(b, '[')
	for i, a := range addrs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = a.AppendTo(b)
		b = append(b, '"')
	}
	return append(b, ']')
}

// decodeName reads a name key's value: a JSON list of addresses. The name
// must be canonical, and the list valid for spec.Roster.Validate; the
// addresses are returned sorted.
func decodeName(name string, value []byte) ([]netip.Addr, error) {
	if name != spec.CanonicalName(name) {
		return nil, &spec.FieldError{Path: fmt.Sprintf("names[%q]", name), Reason: "is not canonical (lowercase, no trailing dot)"}
	}
	var list []string
	if err := json.Unmarshal(value, &list); err != nil {
		return nil, &spec.FieldError{Path: fmt.Sprintf("names[%q]", name), Reason: "want a JSON list of addresses: " + err.Error()}
	}
	addrs := make([]netip.Addr, 0, len(list))
	for i, s := range list {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, &spec.FieldError{Path: fmt.Sprintf("names[%q][%d]", name, i), Reason: fmt.Sprintf("%q is not an IP address", s)}
		}
		addrs = append(addrs, a)
	}
	// The roster's own rules, on a roster of one name.
	if err := (&spec.Roster{Generation: 1, Names: map[string][]netip.Addr{name: addrs}}).Validate(); err != nil {
		return nil, err
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return addrs, nil
}

// nameOf returns the mesh name of a roster bucket key, or false for a key
// that is not a name's.
func nameOf(key string) (string, bool) {
	return strings.CutPrefix(key, namePrefix)
}
