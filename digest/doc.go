// Package digest computes the create-time identity of a container: a
// versioned hash of the rendered settings podman fixes at creation, kept in a
// label on the container, so that a reconciler can tell from one List call
// which containers must be replaced, and say why.
//
// The digest covers an explicit allow-list of fields in a canonical encoding
// (sorted maps, nil equal to empty, defaults applied by spec.Render and then
// omitted), never a dump of a Go struct. A container labelled with an older
// digest version is judged by that version: upgrading meshhost never
// replaces a container by itself.
//
// The current digest (v2) is keyed with the machine's Key (Key.Of,
// Key.Matches), as the record's value hashes are: a container's labels are
// readable by more than root (podman's event log), and an unkeyed digest of
// settings that include env values would let a guessed value be checked
// against it. Of is the unkeyed v1 digest, which judges containers labelled
// before v2.
package digest
