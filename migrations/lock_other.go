//go:build !unix

package migrations

import "os"

// lockFile is a no-op where flock does not exist; one process at a time.
func lockFile(path string) (func(), error) { return func() {}, nil }

// inodeOf is 0: the stamp goes by time and size alone.
func inodeOf(os.FileInfo) uint64 { return 0 }
