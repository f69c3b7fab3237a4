package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshhost/meshhost/internal/natssource"
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
			"flags and checks (the very ones it runs at its start), says every fault at\n" +
			"once, naming the line and the key, and prints the settings in effect. Agent\n" +
			"flags given here are checked with the file, as the agent would take them.\n" +
			"A refused configuration exits 78, as the agent does.",
		args:   cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		valid:  []string{"check"},
		define: defineConfig,
	})
}

func defineConfig(env *environment, fs *flag.FlagSet) runner {
	output := fs.String("output", "text", "output format: text or json")
	f := defineAgentFlags(fs)
	// The agent reads no file unless told; its check reads the package's.
	config := fs.Lookup("config")
	config.Value.Set(defaultConfig)
	config.DefValue, config.Usage = defaultConfig, "the configuration `FILE` to check"
	return func(ctx context.Context, args []string) (int, error) {
		c, err := f.check(ctx, env)
		if err != nil {
			return exitConfig, err // with --output json, printed as every command's error is
		}
		if len(c.IgnoredCache) > 0 {
			fmt.Fprintf(env.stderr, "warning: the embedded resolver's cache flags are ignored with --resolver unix: (the resolver service keeps its own cache): give them to meshhost-resolver flags=%s\n", strings.Join(c.IgnoredCache, ","))
		}
		settings := c.effective()
		if *output == "json" {
			return exitOK, json.NewEncoder(env.stdout).Encode(map[string]any{"config": c.ConfigPath, "ok": true, "keys": c.Keys, "settings": settings})
		}
		fmt.Fprintf(env.stdout, "%s: ok (%d settings: %s)\n", c.ConfigPath, len(c.Keys), strings.Join(c.Keys, ", "))
		printSettings(env.stdout, settings)
		return exitOK, nil
	}
}

// setting is one of the agent's settings in effect, and where it comes
// from: "file" (with its line), "flag" (the command line), "environment"
// or "default".
type setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
	Line   int    `json:"line,omitempty"`
	bare   bool   // a number or a boolean: written without quotes
}

// effective lists every setting of the agent in effect, by name.
func (c *agentConfig) effective() []setting {
	var out []setting
	c.fs.VisitAll(func(fl *flag.Flag) {
		if fl.Name == "config" || fl.Name == "output" || fl.Name == "help" {
			return
		}
		s := setting{Name: fl.Name, Value: fl.Value.String(), Source: "default"}
		if g, ok := fl.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case bool, int, int64, uint, uint64, float64:
				s.bare = true
			}
		}
		switch {
		case c.given[fl.Name]:
			s.Source = "flag"
		case slices.Contains(c.Keys, fl.Name):
			s.Source, s.Line = "file", c.lines[fl.Name]
		}
		switch fl.Name {
		case "source":
			s.Value = natssource.RedactURL(s.Value)
		case "podman":
			if s.Value == "" && c.PodmanURI != "" {
				s.Value, s.Source = c.PodmanURI, "environment"
			}
		}
		out = append(out, s)
	})
	return out
}

// printSettings prints settings as agent.toml lines, each with its source.
func printSettings(w io.Writer, settings []setting) {
	for _, s := range settings {
		src := s.Source
		if s.Line > 0 {
			src = fmt.Sprintf("file, line %d", s.Line)
		}
		v := strconv.Quote(s.Value)
		if s.bare {
			v = s.Value
		}
		fmt.Fprintf(w, "%s = %s  # %s\n", s.Name, v, src)
	}
}
