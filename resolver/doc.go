// Package resolver is the mesh's embedded DNS server: it answers the names of
// a spec.Roster authoritatively and forwards every other question to the
// host's upstream resolvers, so containers resolve mesh names at lookup time
// instead of carrying a copy of the roster.
//
// A Server is made with New, fed rosters with Update (each one validated,
// compiled off the hot path and swapped in atomically) and bound to addresses
// with Listen. Compiling a roster steps aside whenever a query waits on one
// of the server's UDP sockets (Server.Busy), so on a single CPU a swap of
// 100,000 names does not hold queries back. The last good roster is saved to Config.StatePath and loaded by
// New, so a restarted resolver answers before the controller is reachable.
//
// Answers for roster names are written straight into the reply buffer from a
// compact table (no allocation, no goroutine per query); anything unusual
// takes the full codeberg.org/miekg/dns path. Other names are forwarded
// (forward.go: a few long-lived sockets per upstream on random ports, failing
// upstreams skipped for a while) and their answers kept in a bounded cache
// (cache.go) that never holds the roster's names. The resolver never binds an
// address and port that another process serves (aardvark-dns in particular),
// and it answers only the clients it is told to (loopback and Config.Allow):
// it is never an open resolver.
package resolver
