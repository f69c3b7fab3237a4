package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/dnscheck"
	"github.com/meshhost/meshhost/reconcile/podman"
)

func init() {
	register(command{name: "dns-check", use: "CONTAINER NAME", args: cobra.ExactArgs(2), summary: "look NAME up from inside the container, and say who answered, what, and why not (exit 3: a server failed)",
		long: "Asks every nameserver of the container's resolv.conf for NAME, from inside its network namespace (needs root).", define: defineDNSCheck})
}

// dnsCheckJSON is `meshhost dns-check --output json`.
type dnsCheckJSON struct {
	Container string            `json:"container"`
	PID       int               `json:"pid"`
	Networks  map[string]string `json:"networks"`
	// RosterError says why there is no roster to judge the name by (kind
	// "unknown").
	RosterError string `json:"roster_error,omitempty"`
	*dnscheck.Report
}

func defineDNSCheck(env *environment, fs *flag.FlagSet) runner {
	state := fs.String("state", statedir.Default, "the agent's state directory: it says where the agent's resolver is, whose roster in force says which names are the mesh's")
	resolverAt := fs.String("resolver", "", "where the agent's resolver is, to read the roster in force from: embedded (STATE/roster.json) or unix:PATH (meshhost-resolver's control socket); default: where the agent that last started said, in STATE/resolver")
	socket := fs.String("podman", "", "podman API socket (default $MESHHOST_PODMAN_SOCKET, $CONTAINER_HOST)")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for each nameserver")
	output := fs.String("output", "text", "output format: text or json")
	return func(ctx context.Context, pos []string) (int, error) {
		if len(pos) != 2 {
			return exitUsage, errors.New("name a container and a name")
		}
		if *output != "text" && *output != "json" {
			return exitUsage, fmt.Errorf("--output %q: want text or json", *output)
		}
		dir, err := existingState(*state) // before podman: a typo is said first
		if err != nil {
			return exitError, err
		}
		uri := podmanSocket(env, *socket)
		if uri == "" {
			return exitError, errNoPodman
		}
		rt, err := podman.New(ctx, uri, nil)
		if err != nil {
			return 1, err
		}
		box, err := rt.Sandbox(ctx, pos[0])
		if err != nil {
			return 1, err
		}
		// Without the roster in force the lookups are still made and
		// judged, but not against the roster: the output says why.
		roster, rosterErr := agent.ServedRoster(ctx, dir, *resolverAt)
		if rosterErr == nil && roster == nil {
			rosterErr = errors.New("the agent's resolver serves no roster yet")
		}
		rep, err := dnscheck.Check(ctx, dnscheck.Config{
			Netns:      fmt.Sprintf("/proc/%d/ns/net", box.PID),
			ResolvConf: fmt.Sprintf("/proc/%d/root/etc/resolv.conf", box.PID),
			Name:       pos[1], Roster: roster, Timeout: *timeout,
		})
		if err != nil {
			return 1, err
		}
		code := 0
		for _, r := range rep.Results {
			if r.Verdict != dnscheck.OK {
				code = 3
			}
		}
		if *output == "json" {
			out := dnsCheckJSON{Container: box.Name, PID: box.PID, Networks: map[string]string{}, Report: rep}
			if roster == nil {
				out.RosterError = rosterErr.Error()
			}
			for n, a := range box.Networks {
				out.Networks[n] = a.String()
			}
			return code, json.NewEncoder(env.stdout).Encode(out)
		}
		printDNSCheck(env.stdout, box, rep, rosterErr)
		return code, nil
	}
}

// printDNSCheck prints a dns-check report as text.
func printDNSCheck(w io.Writer, box podman.Sandbox, rep *dnscheck.Report, rosterErr error) {
	var nets []string
	for _, n := range box.NetworkNames() {
		nets = append(nets, fmt.Sprintf("%s (%s)", n, box.Networks[n]))
	}
	fmt.Fprintf(w, "container %s (pid %d) on %s\n", box.Name, box.PID, strings.Join(nets, ", "))
	fmt.Fprintf(w, "resolv.conf: nameserver %v; search %v; options %v\n", rep.Nameservers, rep.Search, rep.Options)
	switch rep.Kind {
	case "mesh":
		fmt.Fprintf(w, "%s: a mesh name; the roster in force (generation %d) says %v\n", rep.Name, rep.RosterGeneration, rep.RosterAddrs)
	case "zone":
		fmt.Fprintf(w, "%s: inside the mesh zone %q, not in the roster in force (generation %d)\n", rep.Name, rep.Zone, rep.RosterGeneration)
	case "outside":
		fmt.Fprintf(w, "%s: outside the mesh: meshhost's resolver forwards it upstream\n", rep.Name)
	default:
		fmt.Fprintf(w, "%s: no roster to judge it by (%v)\n", rep.Name, rosterErr)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tFROM\tMESHHOST\tVERDICT\tANSWER\tTIME\tWHY")
	for _, r := range rep.Results {
		who := "-"
		if r.Meshhost {
			who = "yes"
		}
		answer := "-"
		if len(r.Answer) > 0 {
			answer = fmt.Sprint(r.Answer)
		} else if r.Rcode != "" {
			answer = r.Rcode
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Server, orDashStr(r.Client), who, r.Verdict, answer,
			time.Duration(r.LatencySeconds*float64(time.Second)).Round(100*time.Microsecond), r.Why)
	}
	tw.Flush()
	if rep.Answered != "" {
		fmt.Fprintf(w, "answered first: %s (musl takes the first answer, NXDOMAIN included; glibc asks in order)\n", rep.Answered)
	} else {
		fmt.Fprintln(w, "no server answered: lookups fail in this container")
	}
}

func orDashStr(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
