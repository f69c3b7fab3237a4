// Package journal keeps a machine's history on disk: every declaration and
// every roster the machine applied, with the roster's changes, and what
// each reconcile pass did, so that an operator can say which name moved and
// which container was replaced, and why.
//
// A journal is a directory. Each entry is one JSON file, written atomically
// (temporary file, fsync, rename, fsync of the directory), and only the
// newest entries of each kind are kept (Options.Keep), so the history is
// bounded.
//
// Layout (format version 3; Version has the history):
//
//	DIR/declarations/00000000000000000042.json  a DeclarationEntry, named by generation
//	DIR/rosters/00000000000000000108.json       a RosterEntry (a roster that moved alone), named by roster generation
//	DIR/passes/00000000000000000017.json        a PassEntry, named by sequence number
package journal
