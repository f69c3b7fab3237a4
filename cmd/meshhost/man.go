package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/spf13/cobra/doc"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
)

func init() {
	register(command{name: "man", summary: "write meshhost's man pages, one per command, into --dir (make man)", hidden: true, define: defineMan})
}

// defineMan writes the man pages from the commands themselves, so that
// they list what --help lists.
func defineMan(env *environment, fs *flag.FlagSet) runner {
	dir := fs.String("dir", "man", "the `DIR` to write meshhost.1 and meshhost-COMMAND.1 into")
	return func(ctx context.Context, args []string) (int, error) {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return exitError, err
		}
		root := newRoot(ctx, env, &outcome{})
		root.DisableAutoGenTag = true // the same pages from the same commands: no date in them
		for _, c := range root.Commands() {
			c.DisableAutoGenTag = true
		}
		header := &doc.GenManHeader{Title: "MESHHOST", Section: "1", Source: "meshhost " + buildinfo.Get().Version, Manual: "meshhost manual"}
		if err := doc.GenManTree(root, header, *dir); err != nil {
			return exitError, fmt.Errorf("writing the man pages: %w", err)
		}
		fmt.Fprintf(env.stdout, "man pages written to %s\n", *dir)
		return exitOK, nil
	}
}
