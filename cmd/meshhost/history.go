package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/agent/statedir"
)

func init() {
	register(command{name: "history", summary: "the declarations this machine applied and what each pass did", run: runHistory})
	register(command{name: "roster", summary: "roster diff A B: names added, removed or moved; roster accept GEN: let a held roster shrink", run: runRoster})
}

func openJournal(state string) (*journal.Journal, error) {
	return journal.Open(statedir.New(state).Journal(), journal.Options{})
}

func runHistory(ctx context.Context, env *environment, args []string) (int, error) {
	fs := newFlagSet(env, "history")
	state := fs.String("state", statedir.Default, "the agent's state directory")
	output := fs.String("output", "text", "output format: text or json")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	j, err := openJournal(*state)
	if err != nil {
		return 1, err
	}
	entries, err := j.History()
	if err != nil {
		return 1, err
	}
	if *output == "json" {
		if entries == nil {
			entries = []journal.Entry{}
		}
		return 0, json.NewEncoder(env.stdout).Encode(entries)
	}
	if len(entries) == 0 {
		fmt.Fprintln(env.stdout, "no history yet")
	}
	for _, e := range entries {
		fmt.Fprintln(env.stdout, e.String())
	}
	return 0, nil
}

func runRoster(ctx context.Context, env *environment, args []string) (int, error) {
	fs := newFlagSet(env, "roster")
	state := fs.String("state", statedir.Default, "the agent's state directory")
	output := fs.String("output", "text", "output format: text or json")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: meshhost roster diff A B    names added, removed or moved from roster generation A to B")
		fmt.Fprintln(fs.Output(), "       meshhost roster accept GEN  let roster generation GEN drop more names than the guard allows")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2, err
	}
	switch {
	case len(pos) == 3 && pos[0] == "diff":
		a, errA := strconv.ParseUint(pos[1], 10, 64)
		b, errB := strconv.ParseUint(pos[2], 10, 64)
		if errA != nil || errB != nil {
			return 2, errors.New("roster diff takes two roster generations, e.g. roster diff 6 7")
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
			return 2, fmt.Errorf("roster accept takes a roster generation, not %q", pos[1])
		}
		if err := agent.AcceptRoster(statedir.New(*state), gen); err != nil {
			return 1, err
		}
		fmt.Fprintf(env.stdout, "roster generation %d may shrink; the agent applies it on its next pass\n", gen)
		return 0, nil
	}
	fs.Usage()
	return 2, errors.New("want diff A B or accept GEN")
}
