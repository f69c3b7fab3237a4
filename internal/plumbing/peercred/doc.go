// Package peercred tells who is at the other end of a unix socket
// (SO_PEERCRED: the user and process as they were when they connected) and
// admits to a listener only the users allowed: root, the process's own
// user, and the uids an operator names. A socket file's mode is the first
// fence; this is the second, which holds when the socket sits in a shared
// directory or its mode is widened.
package peercred
