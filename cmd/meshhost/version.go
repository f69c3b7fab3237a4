package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
)

func init() {
	register(command{name: "version", summary: "print meshhost's version and the formats it speaks", define: defineVersion})
}

func defineVersion(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	return func(ctx context.Context, args []string) (int, error) {
		bi := buildinfo.Get() // stamped by make build and make deb
		info := struct {
			Version string   `json:"version"`
			Commit  string   `json:"commit"`
			Go      string   `json:"go"`
			Digest  string   `json:"digest_version"`
			Digests []string `json:"digest_versions_understood"`
		}{bi.Version, bi.Commit, bi.Go, digest.Current, digest.Versions()}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(info)
		}
		fmt.Fprintf(env.stdout, "meshhost %s, digest %s\n", bi, info.Digest)
		return 0, nil
	}
}
