// Command stamped prints what buildinfo reports, for TestStamped, which
// builds it with the Makefile's linker flags.
package main

import (
	"fmt"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
)

func main() {
	in := buildinfo.Get()
	fmt.Println(in.Version, in.Commit, in.Go, in.String())
}
