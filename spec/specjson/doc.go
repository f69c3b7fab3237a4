// Package specjson reads the documents of package spec's vocabulary: the
// declaration the mesh controller sends a machine (ParseDeclaration) and the
// roster file (ParseRoster). Both read strictly: unknown fields, wrong
// types and duplicate keys are faults, every fault is reported at once as a
// *spec.FieldError naming its path, and nothing half-parsed is returned.
//
// A roster document without faults and without anything unusual in it is
// read by a fast reader straight into a validated, normalized spec.Roster;
// any other document goes through the strict reader, which names every
// fault. Both give the same roster for what the fast one takes
// (FuzzParseRoster, FuzzParseDeclaration).
//
// Writing needs no reader: spec.Declaration and spec.Roster marshal
// themselves (encoding/json) in the format this package reads.
package specjson

import (
	"fmt"

	"github.com/meshhost/meshhost/spec"
)

// Reader reads documents. The zero Reader is ready to use; the package's
// functions use it.
type Reader struct {
	// Busy, when set, reports whether latency-sensitive work waits in this
	// process (the in-process resolver's Server.Busy: a query in one of its
	// sockets' receive queues). Reading a large roster then steps aside
	// briefly between its steps, so that work runs first, even on one CPU.
	// Nil: never step aside.
	Busy func() bool
}

// CheckSize refuses a document of n bytes, over spec.MaxDocumentBytes, with
// a *spec.FieldError saying both. The readers check every document they
// are given; a source checks the size of a file or body before reading it
// whole.
func CheckSize(n int64) error {
	if n > spec.MaxDocumentBytes {
		return &spec.FieldError{Reason: fmt.Sprintf("the document is %d bytes; at most %d", n, spec.MaxDocumentBytes)}
	}
	return nil
}
