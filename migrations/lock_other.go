//go:build !unix

package migrations

// lockDir is a no-op where flock does not exist; one process at a time.
func lockDir(dir string) (func(), error) { return func() {}, nil }
