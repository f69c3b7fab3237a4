package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// defaultConfig is where the package puts the agent's configuration, and
// where its unit points `meshhost agent --config`.
const defaultConfig = "/etc/meshhost/agent.toml"

func init() {
	register(command{
		name:    "config",
		use:     "check [--config FILE] [AGENT FLAGS]",
		summary: "check the agent's configuration file",
		long: "Reads the file as `meshhost agent --config FILE` would, with the agent's own\n" +
			"flags and checks, and says what is wrong, naming the line and the key, or\n" +
			"that it is fine. Agent flags given here are checked with the file, as the\n" +
			"agent would take them.",
		args:   cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		valid:  []string{"check"},
		define: defineConfig,
	})
}

func defineConfig(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	var keys []string
	check := defineAgentChecked(env, fs, func(_ string, applied []string) { keys = applied })
	// The agent reads no file unless told; its check reads the package's.
	config := fs.Lookup("config")
	config.Value.Set(defaultConfig)
	config.DefValue, config.Usage = defaultConfig, "the configuration `FILE` to check"
	return func(ctx context.Context, args []string) (int, error) {
		path := config.Value.String()
		code, err := check(ctx, nil)
		if err != nil {
			if code == exitUsage {
				code = exitError // the file is wrong, not how config check was called
			}
			return code, err // with --output json, printed as every command's error is
		}
		if *output == "json" {
			return exitOK, json.NewEncoder(env.stdout).Encode(map[string]any{"config": path, "ok": true, "keys": keys})
		}
		fmt.Fprintf(env.stdout, "%s: ok (%d settings: %s)\n", path, len(keys), strings.Join(keys, ", "))
		return exitOK, nil
	}
}
