// Package admit decides whether what arrives is taken: a declaration, a
// roster, a roster delta, or an operator's control, judged against what is
// in force and what is served. Every path that takes such an input (the
// push endpoint, a watched file or directory, the NATS watcher and the
// Source it feeds, publish, the resolver's control socket and its roster
// file, rollback, approve, roster accept) asks it, so that two paths never
// answer the same input differently.
//
// A Decision is one of three verdicts: Accepted (put it in force), Same
// (what is in force again: idempotent, no fault, nothing changes) or
// Refused, with a Reason and Faults naming each field and the fix. The
// reasons are metric labels (meshhost_agent_declarations_refused_total)
// and wire values; they never change:
//
//	invalid                  a fault in the document, or past its limits
//	too_large                over spec.MaxDocumentBytes
//	other_machine            another machine's declaration
//	older_generation         a declaration generation older than the one in force
//	generation_reused        the generation in force with other content
//	roster_older             a roster older than the one served or in force
//	roster_generation_reused the roster generation served or in force, other names
//	delta_base               a delta that does not apply to the roster in force
//	not_held                 approve or roster accept of what is not held
//
// Glossary. The declaration generation names one declaration (containers,
// mesh_names); the roster generation names one roster (names to
// addresses). Neither ever goes back, and each names one content: a
// changed one needs a newer generation. In force: what the agent's Source
// holds. Served: the roster the resolver answers from. Held: a declaration
// the blast-radius hold keeps back, or a roster shrink the guard keeps
// back, until an operator lets it through.
//
// Rollback and a controller. A rollback is a local override: the operator
// re-issues an old declaration's containers under a generation above every
// one the machine has seen (Rollback), with the roster in force. The
// controller's declarations of that generation or older are refused
// (older_generation, generation_reused) and its roster keeps flowing: where
// the roster travels apart from the declaration (Parts, RosterDelta: the
// NATS source) it moves alone under the rollback. The controller's first
// declaration with a generation above the rollback's supersedes it.
//
// Faults never carry env or label values: a container's differing field
// is named, not its value.
package admit
