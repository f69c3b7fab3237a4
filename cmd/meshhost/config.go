package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// defaultConfig is where the package puts the agent's configuration, and
// where its unit points `meshhost agent --config`.
const defaultConfig = "/etc/meshhost/agent.toml"

func init() {
	register(command{name: "config", summary: "check the agent's configuration file: meshhost config check [--config FILE]", run: runConfig})
}

// runConfig is `meshhost config check`: it reads the file as `meshhost
// agent --config FILE` would, with the agent's own flags and checks, and
// says what is wrong, naming the line and the key, or that it is fine.
func runConfig(ctx context.Context, env *environment, args []string) (int, error) {
	if len(args) == 0 || args[0] != "check" {
		return 2, fmt.Errorf("want `meshhost config check [--config FILE] [--output text|json] [AGENT FLAGS]`")
	}
	fs := newFlagSet(env, "config check")
	path := fs.String("config", defaultConfig, "the configuration `FILE` to check")
	output := fs.String("output", "text", "output format: text or json")
	// Flags after these are the agent's, checked with the file as the
	// agent would take them: `meshhost config check -- --podman unix:...`.
	if err := fs.Parse(args[1:]); err != nil {
		return 2, err
	}
	if *output != "text" && *output != "json" {
		return 2, fmt.Errorf("--output %q: want text or json", *output)
	}
	var keys []string
	agentArgs := append([]string{"--config", *path}, fs.Args()...)
	code, err := agentMain(ctx, env, agentArgs, func(_ string, applied []string) { keys = applied })
	if err != nil {
		if code == 2 {
			code = 1 // the file is wrong, not how config check was called
		}
		if *output == "json" {
			json.NewEncoder(env.stdout).Encode(map[string]any{"config": *path, "ok": false, "error": err.Error()})
		}
		return code, err
	}
	if *output == "json" {
		return 0, json.NewEncoder(env.stdout).Encode(map[string]any{"config": *path, "ok": true, "keys": keys})
	}
	fmt.Fprintf(env.stdout, "%s: ok (%d settings: %s)\n", *path, len(keys), strings.Join(keys, ", "))
	return 0, nil
}
