// Package journal keeps a machine's history on disk: every declaration and
// every roster the machine applied, with the roster's changes, and what
// each reconcile pass did, so that an operator can say which name moved and
// which container was replaced, and why.
//
// A journal is a directory, a subdirectory per kind of entry. Entries are
// appended to segments, logs of up to a quarter of what the journal keeps
// (package deltalog: a line an entry, with its key and a checksum, synced
// before the write returns; a crash tears at most the last line, which
// readers drop). Only the newest entries of each kind are kept
// (Options.Keep, Options.MaxBytes): the oldest segments are removed whole,
// so the history is bounded.
//
// Layout (format version 4; Version has the history):
//
//	DIR/declarations/00000000000000000042.log  DeclarationEntry records, keyed by generation, from 42 on
//	DIR/rosters/00000000000000000108.log       RosterEntry records (a roster that moved alone), keyed by roster generation
//	DIR/passes/00000000000000000017.log        PassEntry records, keyed by sequence number
//
// A record is "KEY CRC32C JSON\n" (deltalog's format): `cut -d' ' -f3-
// FILE | jq` reads the entries. Files NNN.json beside them are
// entries of versions 1 to 3, one JSON document each, read as they are.
package journal
