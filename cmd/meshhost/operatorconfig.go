package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/internal/plumbing/flagfile"
)

// operatorConfigKeys are, for each operator command, the agent's settings
// it takes from the agent's configuration file (--config, default
// /etc/meshhost/agent.toml when it exists), as the agent does: on a
// packaged host `meshhost plan` finds podman, the state directory and the
// resolver where the agent does. The command's own flags win. probe's
// --state records results, which it does only when told: it takes podman
// alone.
var operatorConfigKeys = map[string][]string{
	"plan":      {"state", "podman", "resolver"},
	"explain":   {"state", "podman", "resolver"},
	"dns-check": {"state", "podman", "resolver"},
	"migrate":   {"state", "podman", "machine"},
	"probe":     {"podman"},
	"status":    {"state"},
	"approve":   {"state"},
	"freeze":    {"state"},
	"unfreeze":  {"state"},
	"rollback":  {"state"},
	"history":   {"state"},
	"roster":    {"state"},
}

// operatorConfig is an operator command's --config.
type operatorConfig struct {
	fs   *flag.FlagSet
	keys []string
	path *string
}

// addOperatorConfig defines --config on fs, for a command that takes keys
// of the agent's configuration; nil when it takes none.
func addOperatorConfig(fs *flag.FlagSet, keys []string) *operatorConfig {
	if len(keys) == 0 || fs.Lookup("config") != nil {
		return nil
	}
	usage := fmt.Sprintf("the agent's configuration `FILE` (default %s when it exists): its %s, unless given here", defaultConfig, strings.Join(keys, ", "))
	return &operatorConfig{fs: fs, keys: keys, path: fs.String("config", "", usage)}
}

// apply sets the command's flags that the command line did not give from
// the agent's configuration file, read as the agent reads it (a fault in
// it is the command's error, exit exitConfig).
func (o *operatorConfig) apply(ctx context.Context, env *environment) error {
	path := *o.path
	if path == "" {
		path = env.agentConfig()
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the agent's configuration: %w", err)
	}
	af := flag.NewFlagSet("agent", flag.ContinueOnError)
	af.SetOutput(io.Discard)
	defineAgentFlags(af)
	vals, err := flagfile.Read(af, path, data, map[string]bool{}, "config")
	if err != nil {
		return fmt.Errorf("the agent's configuration (--config): %w", err)
	}
	given := givenFlags(ctx)
	for _, v := range vals {
		if !slices.Contains(o.keys, v.Key) || given[v.Key] || o.fs.Lookup(v.Key) == nil {
			continue
		}
		for _, s := range v.Strings {
			if err := o.fs.Set(v.Key, s); err != nil {
				return &flagfile.Error{Path: path, Line: v.Line, Key: v.Key, Err: err}
			}
		}
	}
	return nil
}
