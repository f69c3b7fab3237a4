package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/meshhost/meshhost/digest"
)

func init() {
	register(command{name: "version", summary: "print meshhost's version and the formats it speaks", define: defineVersion})
}

func defineVersion(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	return func(ctx context.Context, args []string) (int, error) {
		version := buildVersion()
		info := struct {
			Version string   `json:"version"`
			Go      string   `json:"go"`
			Digest  string   `json:"digest_version"`
			Digests []string `json:"digest_versions_understood"`
		}{version, runtime.Version(), digest.Current, digest.Versions()}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(info)
		}
		fmt.Fprintf(env.stdout, "meshhost %s (%s), digest %s\n", info.Version, info.Go, info.Digest)
		return 0, nil
	}
}

// version is stamped by a build that names its version:
// go build -ldflags "-X main.version=V".
var version string

// buildVersion is the stamped version, else the module's, else (devel).
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
