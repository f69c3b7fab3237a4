// Package natssource carries the mesh roster and each machine's
// declaration through NATS JetStream key-value buckets, for meshes that
// outgrow pushing every machine the whole document: a change of k names
// costs k small messages per machine, not the roster.
//
// # Buckets
//
// Two buckets, named PREFIX-roster and PREFIX-machines (PREFIX defaults
// to "meshhost"), file storage, History (2) values per key:
//
//	PREFIX-roster
//	  n.<name>   one key per mesh name (canonical: lowercase, no trailing
//	             dot); the value is its addresses as a JSON list,
//	             ["10.89.0.7","fd00::7"]. A removed name is deleted (a KV
//	             delete, or purge).
//	  commit     the commit record, written last (see below).
//	PREFIX-machines
//	  <machine>  the machine's declaration, in the declaration format of
//	             specjson.ParseDeclaration without the "roster" member (the
//	             roster is the roster bucket's): {"schema": 1, "machine":
//	             "novox", "generation": 42, "mesh_names": "off",
//	             "containers": [...]}.
//
// # The commit record
//
// Writing a name does not change any machine's roster; a commit does. The
// commit record is JSON:
//
//	{"version": 1, "generation": 8, "revision": 1234, "names": 100000,
//	 "digest": "5f0c…(32 hex digits)", "zones": ["internal"]}
//
// It says: roster generation 8 is, for every name, the newest value of
// its key at or below bucket revision 1234 (a name whose newest value
// there is a deletion, or that has none, is not in it); that roster has
// 100,000 names; the XOR over its names of the first 16 bytes of
// SHA-256(name, a zero byte, its sorted addresses in text joined by
// commas) is digest; and its zones are zones.
//
// # Writing (what a controller does; Publisher)
//
//  1. Read the commit record and its revision R (none: R = 0). A
//     generation not greater than the committed one is refused.
//  2. Write every name that changed (put, or delete), each key at most
//     once. Writes are pipelined; the highest revision acknowledged is W.
//  3. Write the commit record with compare-and-set on R (KV update with
//     revision R; KV create when R = 0), its revision the highest of W,
//     the previous record's revision and any name key's newest revision
//     the writer read. If another writer committed meanwhile, the server
//     refuses it and nothing is committed; the writer reads again and
//     retries.
//
// A writer that stops between 2 and 3 leaves writes no commit covers.
// Machines do not apply them; the next writer to publish a whole roster
// (PublishRoster) compares the bucket's newest values, committed or not,
// with the roster it wants and rewrites what differs, so its commit covers
// them correctly. PublishDelta, which reads only the names it changes,
// refuses to run on such a bucket (ErrNotClean).
//
// # Reading (what each machine does; Watcher)
//
// A watcher reads the roster bucket in revision order, with history, and
// keeps the values no applied commit covers yet. When it is caught up
// with the bucket, it takes the newest commit record read and computes,
// from the roster in force and those values, the roster the record
// describes: in time proportional to the names written since the last
// applied commit. It puts that roster in force only if its number of
// names and its digest equal the record's; otherwise nothing changes. So
// a roster is applied whole or not at all: a half-written change (no
// commit yet), a write that slipped in among a writer's own, or a value
// the watcher missed, all fail the check, and the roster in force stays.
// A record that fails the check once the watcher is caught up makes it
// read the whole bucket again, once per record.
//
// A commit record whose generation is lower than the one in force, or
// equal with another revision, or that covers fewer revisions, is refused
// as stale (a writer racing with an older view, or a replayed write):
// generations never go backwards. A watcher that was away or is behind
// skips the commits it missed and applies the newest one whole; each
// roster it applies is exactly the one committed under its generation.
//
// The watcher reconnects for ever. After a disconnect, a stalled watch, or
// a restart of the server it resumes reading after the last revision it
// read; a bucket recreated, or whose revisions went backwards, is read
// whole again. Meanwhile the roster in force stays, and Health reports the
// watcher once it has been cut off for longer than its patience. A panic
// while watching (a bug in the watcher, its sink or OnChange) is recovered
// and counted: both buckets are read whole again, the roster in force is
// rebuilt from what the bucket holds, and the sink gets it whole.
//
// The machine's declaration is one key, read with the same resumption; a
// declaration whose generation is not newer than the one read is refused,
// and so is a deletion: the declaration in force stays.
//
// A server killed outright (one server, no sync_always) may lose writes it
// acknowledged just before, and hand their revisions to new writes. A
// watcher notices when the commit record it reads on resuming is not the
// one it last read at that revision, and reads the bucket whole again;
// the controller's next publish restores what was lost.
//
// # The agent
//
// A Watcher hands the machine's declaration, with the roster in force, to
// its Sink whenever either changes. A DeltaSink (the agent's declaration
// source) that took the roster a commit changes gets that change alone
// (DeltaSink.PutRosterDelta): one name moving costs the agent that name,
// not the roster. The first declaration, a change of the machine's
// declaration, and a commit after a gap go whole.
//
// # Permissions
//
// A machine's credentials need read only the roster and the machine's own
// declaration; Permissions prints a server configuration (one account,
// MESHHOST, its users the controller and one per machine) in which that
// is all they can do (MachinePermissions lists the subjects). Its
// watcher answers on an inbox of its own, InboxPrefix(machine), the only
// one its credentials may subscribe to: no machine receives what the
// server delivers to another. A consumer of the machines bucket can be
// created only through the API subject that names its filter, the
// machine's key; the server refuses one whose filter differs. A machine
// writes nothing. The controller writes both buckets.
//
// # Clusters
//
// The watcher takes several server URLs (Server.URL, separated by
// commas) and moves to another when its server dies; the buckets are
// replicated when created with EnsureReplicatedBuckets (3 replicas keep
// every acknowledged write when one server dies). A stream whose leader
// died answers nothing until a new one is elected, seconds later:
// Retry bounds each request and repeats a publish until it commits.
//
// # Server versions
//
// Only core JetStream operations are used (stream info, direct get,
// ordered push consumers from a start sequence, publish with an expected
// last subject sequence), so NATS server 2.9 (Debian 12) and later serve
// it. The roster bucket is read by a consumer without a subject filter:
// nats-server 2.9 creates a filtered one in time proportional to the
// bucket's keys, which made a thousand watchers of 100,000 names take
// minutes to start.
package natssource
