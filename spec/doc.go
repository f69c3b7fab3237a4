// Package spec is the vocabulary of meshhost: the containers a machine should
// run, the mesh's roster of names, the name modes a container can get, and the
// declaration the mesh controller sends a machine.
//
// Nothing here talks to a runtime or a network: spec is a leaf package, so
// the digest, resolver and reconcile packages can all speak it without build
// tags or dependencies.
package spec
