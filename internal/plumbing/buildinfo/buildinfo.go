// Package buildinfo says which build of meshhost is running: the version
// and commit stamped into the binary when it was built (`make build`,
// `make deb`), and the Go release that built it.
//
// The build stamps them with the linker:
//
//	go build -ldflags "-X github.com/meshhost/meshhost/internal/plumbing/buildinfo.version=v1.2.3
//	                   -X github.com/meshhost/meshhost/internal/plumbing/buildinfo.commit=0123abc..."
//
// The version is `git describe` of the tree built (scripts/version): a tag
// v1.2.3, v1.2.3-4-gabcdef0 four commits after it, v0.0.0-112-g100a28c in a
// repository without a tag, with -dirty when the tree had uncommitted
// changes. A plain `go build` stamps nothing: the version then is the
// module's (a `go install` of a tagged release) or "(devel)", and the commit
// is the one Go records from the checkout, when it does.
//
// It imports the standard library only: every binary links it, the static
// probe too.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Stamped by the linker (-X); see the package doc.
var (
	version string
	commit  string
)

// Info is what Get reports.
type Info struct {
	Version string `json:"version"` // `git describe`, e.g. v1.2.3-4-gabcdef0
	Commit  string `json:"commit"`  // the full commit hash, or "unknown"
	Go      string `json:"go"`      // the Go release that built the binary, e.g. go1.26.8
}

// Get returns the running binary's build information.
func Get() Info {
	in := Info{Version: version, Commit: commit, Go: runtime.Version()}
	if in.Version != "" && in.Commit != "" {
		return in
	}
	bi, ok := debug.ReadBuildInfo()
	if in.Version == "" {
		in.Version = "(devel)"
		if ok && bi.Main.Version != "" {
			in.Version = bi.Main.Version
		}
	}
	if in.Commit == "" && ok {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if in.Commit != "" && modified {
			in.Commit += "-dirty"
		}
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	return in
}

// String is the one line `--version` prints: "v1.2.3 (commit 0123abc, go1.26.8)".
func (in Info) String() string {
	c := in.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	return in.Version + " (commit " + c + ", " + in.Go + ")"
}
