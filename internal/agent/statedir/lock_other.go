//go:build !unix

package statedir

// Lock does nothing where flock does not exist: one agent at a time is
// the operator's to keep.
func (d Dir) Lock() (*Lock, error) { return &Lock{}, nil }
