//go:build !unix

package migrations

// lockFile is a no-op where flock does not exist; one process at a time.
func lockFile(path string) (func(), error) { return func() {}, nil }
