package main

import (
	"context"
	"flag"

	"github.com/spf13/cobra"
)

// completionShells are the shells meshhost completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

func init() {
	register(command{
		name: "completion", use: "bash|zsh|fish",
		summary: "print the shell completion script for bash, zsh or fish",
		long: "e.g. meshhost completion bash > /etc/bash_completion.d/meshhost (the package\n" +
			"installs the three).",
		args:   cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		valid:  completionShells,
		define: defineCompletion,
	})
}

// defineCompletion writes the completion script of the commands
// themselves, as cobra's own completion command would; it is meshhost's
// own so that it takes only the shells it names (cobra's printed its help
// and exited 0 for any other word).
func defineCompletion(env *environment, fs *flag.FlagSet) runner {
	return func(ctx context.Context, args []string) (int, error) {
		root := newRoot(ctx, env, &outcome{})
		var err error
		switch args[0] {
		case "bash":
			err = root.GenBashCompletionV2(env.stdout, true)
		case "zsh":
			err = root.GenZshCompletion(env.stdout)
		case "fish":
			err = root.GenFishCompletion(env.stdout, true)
		}
		if err != nil {
			return exitError, err
		}
		return exitOK, nil
	}
}
