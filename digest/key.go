package digest

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
)

// KeySize is the least number of bytes of secret a Key is made from.
const KeySize = 32

// HashLen is the length of the value hashes a Change shows for a secret
// field's entries: hex digits of the value's keyed hash (Key.ValueHash),
// enough to tell that a value changed. Without the machine's key they tell
// nothing of the value, however few values it could be.
const HashLen = 4

// ErrOtherKey is returned for a hash made with another key than the one
// comparing it (the machine's key was made anew since the container was
// created): with the Changes of a record (Key.ExplainRecord), whose env and
// label values cannot be compared, only their keys; and by Key.Judges and
// Key.Matches for a keyed digest, which cannot be compared at all.
var ErrOtherKey = errors.New("hashed with another key")

// Key is one machine's secret for the keyed value hashes. Wherever meshhost
// records or shows a value of a field that may hold a secret
// (spec.SecretValues: env, labels) outside the machine's root-only state (the
// record label every container carries, and so podman's event log; plan,
// explain, logs, the journal's changes, metrics), it puts
// HMAC-SHA256(secret, value) instead. A hash cannot be checked against a
// guessed value without the secret, and the same value hashes differently on
// two machines.
//
// A Key is read-only once made, and safe for concurrent use.
type Key struct {
	secret []byte
	// id names the key in the records it hashed (recordKeyLabel), so that
	// a record hashed with another key is told apart from one whose
	// values all changed.
	id string
}

// NewKey returns the Key of secret, which must be at least KeySize bytes
// (the agent's is in its state directory: statedir.Dir.LoadHashKey).
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < KeySize {
		return nil, fmt.Errorf("a hash key of %d bytes: want at least %d random bytes", len(secret), KeySize)
	}
	k := &Key{secret: bytes.Clone(secret)}
	k.id = k.sum("io.meshhost key id")[:16]
	return k, nil
}

// NewRandomKey returns a Key of KeySize bytes from crypto/rand, for a
// process that keeps no state (the demo, tests): its hashes compare with no
// other process's.
func NewRandomKey() *Key {
	secret := make([]byte, KeySize)
	rand.Read(secret) // never fails (crypto/rand)
	k, _ := NewKey(secret)
	return k
}

// sum is the keyed hash of v, in hex: what a record keeps.
func (k *Key) sum(v string) string {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

// ValueHash is the short hash a Change shows for a secret value v: the first
// HashLen hex digits of its keyed hash.
func (k *Key) ValueHash(v string) string { return k.sum(v)[:HashLen] }

// sums returns m with each value replaced by its keyed hash.
func (k *Key) sums(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := maps.Clone(m)
	for name, v := range out {
		out[name] = k.sum(v)
	}
	return out
}
