package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
)

func init() {
	register(command{name: "history", summary: "the declarations this machine applied and what each pass did", define: defineHistory})
	register(command{name: "roster", use: "diff A B | accept GEN", args: cobra.RangeArgs(2, 3), valid: []string{"diff", "accept"},
		summary: "roster diff A B: names added, removed or moved; roster accept GEN: let a held roster shrink", define: defineRoster})
}

// openJournal opens the journal of the state directory at state, refusing
// a state directory that does not exist.
func openJournal(state string) (*journal.Journal, error) {
	dir, err := existingState(state)
	if err != nil {
		return nil, err
	}
	return journal.Open(dir.Journal(), journal.Options{})
}

func defineHistory(env *environment, fs *flag.FlagSet) runner {
	state := fs.String("state", statedir.Default, "the agent's state directory")
	output := fs.String("output", "text", "output format: text or json")
	return func(ctx context.Context, args []string) (int, error) {
		j, err := openJournal(*state)
		if err != nil {
			return 1, err
		}
		entries, err := j.History()
		if err != nil {
			return 1, err
		}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(historyJSON(entries))
		}
		if len(entries) == 0 {
			fmt.Fprintln(env.stdout, "no history yet")
		}
		for _, e := range entries {
			fmt.Fprintln(env.stdout, e.String())
		}
		return 0, nil
	}
}

func defineRoster(env *environment, fs *flag.FlagSet) runner {
	state := fs.String("state", statedir.Default, "the agent's state directory")
	output := fs.String("output", "text", "output format: text or json")
	return func(ctx context.Context, pos []string) (int, error) {
		switch {
		case len(pos) == 3 && pos[0] == "diff":
			a, errA := strconv.ParseUint(pos[1], 10, 64)
			b, errB := strconv.ParseUint(pos[2], 10, 64)
			if errA != nil || errB != nil {
				return exitUsage, errors.New("roster diff takes two roster generations, e.g. roster diff 6 7")
			}
			j, err := openJournal(*state)
			if err != nil {
				return 1, err
			}
			d, err := j.RosterDiff(a, b)
			if err != nil {
				return 1, err
			}
			if *output == "json" {
				return 0, json.NewEncoder(env.stdout).Encode(d)
			}
			if d.Empty() {
				fmt.Fprintf(env.stdout, "rosters %d and %d name the same addresses\n", a, b)
				return 0, nil
			}
			fmt.Fprint(env.stdout, d.String())
			return 0, nil
		case len(pos) == 2 && pos[0] == "accept":
			gen, err := strconv.ParseUint(pos[1], 10, 64)
			if err != nil || gen == 0 {
				return exitUsage, fmt.Errorf("roster accept takes a roster generation, not %q", pos[1])
			}
			dir, err := existingState(*state)
			if err != nil {
				return 1, err
			}
			if err := agent.AcceptRoster(dir, gen); err != nil {
				return 1, err
			}
			if *output == "json" {
				return 0, json.NewEncoder(env.stdout).Encode(map[string]uint64{"roster_accepted": gen})
			}
			fmt.Fprintf(env.stdout, "roster generation %d may shrink; the agent applies it on its next pass\n", gen)
			return 0, nil
		}
		return exitUsage, errors.New("want diff A B or accept GEN")
	}
}
