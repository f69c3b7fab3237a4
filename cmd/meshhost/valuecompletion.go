package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/statedir"
)

// flagValues are the values of the flags that take one of a few words,
// by flag name, for completion (meshhost completion): every command's
// flag of that name takes them.
var flagValues = map[string][]string{
	"output":     {"text", "json"},
	"log-format": {"text", "json"},
	"log-level":  {"debug", "info", "warn", "error"},
	"runtime":    {"podman", "memory"},
	"resolver":   {"embedded", "unix:/run/meshhost/resolver.sock"},
}

// heldGenerations complete a command's generation argument with what the
// state directory (its --state) holds: the declaration held for approve,
// the roster held for roster accept.
var heldGenerations = map[string]func(dir statedir.Dir, args []string) []string{
	"approve": func(dir statedir.Dir, args []string) []string {
		if len(args) > 0 {
			return nil
		}
		if st, err := agent.LoadStatus(dir); err == nil && st != nil && st.Held != nil {
			return []string{strconv.FormatUint(st.Held.Generation, 10) + "\tthe declaration held"}
		}
		return nil
	},
	"roster": func(dir statedir.Dir, args []string) []string {
		switch {
		case len(args) == 0:
			return []string{"diff", "accept"}
		case len(args) == 1 && args[0] == "accept":
			if h, err := agent.LoadRosterHold(dir); err == nil && h != nil {
				return []string{strconv.FormatUint(h.Newest, 10) + "\tthe roster held"}
			}
		}
		return nil
	},
}

// addValueCompletion registers, on cc, the completion of its flags'
// values (flagValues) and of its held generations (heldGenerations).
func addValueCompletion(cc *cobra.Command) {
	for name, values := range flagValues {
		if cc.Flags().Lookup(name) != nil {
			cc.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	held, ok := heldGenerations[cc.Name()]
	if !ok {
		return
	}
	cc.ValidArgs = nil // cobra completes from ValidArgs alone when set
	cc.ValidArgsFunction = func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		state := statedir.Default
		if f := cmd.Flags().Lookup("state"); f != nil {
			state = f.Value.String()
		}
		return held(statedir.New(state), args), cobra.ShellCompDirectiveNoFileComp
	}
}
