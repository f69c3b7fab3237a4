package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/natssource"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

func init() {
	register(command{name: "publish", summary: "write a roster and declarations into the NATS JetStream buckets agents watch (what a controller does)",
		use: "[--print-permissions MACHINE...]", args: cobra.ArbitraryArgs, define: definePublish})
}

// natsFlags are the options of a NATS roster source, shared by the agent
// and publish.
type natsFlags struct {
	creds, ca, cert, key *string
	prefix               *string
	patience             *time.Duration
}

func addNATSFlags(fs *flag.FlagSet) natsFlags {
	return natsFlags{
		creds:  fs.String("nats-creds", "", "NATS credentials `file` (user JWT and nkey seed)"),
		ca:     fs.String("nats-ca", "", "CA `file` (PEM) that verifies the NATS server's certificate"),
		cert:   fs.String("nats-cert", "", "client certificate `file` (PEM) for NATS servers that ask for one"),
		key:    fs.String("nats-key", "", "the client certificate's key `file` (PEM)"),
		prefix: fs.String("nats-buckets", natssource.DefaultPrefix, "bucket name `prefix`: PREFIX-roster and PREFIX-machines"),
	}
}

// addPatienceFlag adds the agent's --nats-patience to f (publish has no
// use for it).
func (f *natsFlags) addPatienceFlag(fs *flag.FlagSet) {
	f.patience = fs.Duration("nats-patience", natssource.DefaultPatience, "how long the agent may be cut off from NATS before /healthz says so (the roster in force is served meanwhile)")
}

func (f natsFlags) server(url, name string) natssource.Server {
	return natssource.Server{URL: url, Creds: *f.creds, CA: *f.ca, Cert: *f.cert, Key: *f.key, Name: name}
}

// natsSource is the agent's NATS watcher; its zero value (no --source)
// runs nothing and is always healthy.
type natsSource struct{ w *natssource.Watcher }

// watcher returns the agent's NATS source for --source url (nothing when
// url is empty), feeding the declaration source sink.
func (f natsFlags) watcher(url, machine string, sink *declsource.Source, logger *slog.Logger, reg prometheus.Registerer) (natsSource, error) {
	if url == "" {
		return natsSource{}, nil
	}
	if !strings.HasPrefix(url, "nats://") && !strings.HasPrefix(url, "tls://") {
		return natsSource{}, fmt.Errorf("--source %q: want nats://HOST:PORT or tls://HOST:PORT (the file and push sources are --declaration and --push)", natssource.RedactURL(url))
	}
	w, err := natssource.NewWatcher(natssource.Config{
		Server: f.server(url, "meshhost agent "+machine), Layout: natssource.LayoutFor(*f.prefix),
		Machine: machine, Sink: sink, Patience: *f.patience, Logger: logger, Registerer: reg,
	})
	if err != nil {
		return natsSource{}, fmt.Errorf("--source: %w", err)
	}
	return natsSource{w}, nil
}

func (s natsSource) run(ctx context.Context) error {
	if s.w == nil {
		return nil
	}
	return s.w.Run(ctx)
}

func (s natsSource) health() error {
	if s.w == nil {
		return nil
	}
	return s.w.Health()
}

// declarationFiles is the repeatable --declaration flag of publish.
type declarationFiles []string

func (d *declarationFiles) String() string     { return strings.Join(*d, ",") }
func (d *declarationFiles) Set(v string) error { *d = append(*d, v); return nil }

// readPublished reads and checks what publish is to publish: the roster
// (of rosterPath, else the declarations' one) and the declarations.
func readPublished(rosterPath string, decls declarationFiles) (*spec.Roster, []*spec.Declaration, error) {
	var roster *spec.Roster
	var parsed []*spec.Declaration
	for _, path := range decls {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		d, err := specjson.ParseDeclaration(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		parsed = append(parsed, d)
	}
	if rosterPath != "" {
		data, err := os.ReadFile(rosterPath)
		if err != nil {
			return nil, nil, err
		}
		if roster, err = specjson.ParseRoster(data); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", rosterPath, err)
		}
		return roster, parsed, nil
	}
	roster = parsed[0].Roster
	for i, d := range parsed[1:] {
		if d.Roster.Generation != roster.Generation {
			return nil, nil, fmt.Errorf("%s carries roster generation %d, %s carries %d: pass the roster with --roster", decls[i+1], d.Roster.Generation, decls[0], roster.Generation)
		}
	}
	return roster, parsed, nil
}

func definePublish(env *environment, fs *flag.FlagSet) runner {
	url := fs.String("nats", "", "the NATS server: nats://HOST:4222 or tls://HOST:4222 (default $MESHHOST_NATS_URL)")
	nf := addNATSFlags(fs)
	rosterPath := fs.String("roster", "", "a roster `file` to publish (default: the roster of the declarations)")
	var decls declarationFiles
	fs.Var(&decls, "declaration", "a machine's declaration `file` to publish (repeatable); its roster is published first unless --roster is given")
	output := fs.String("output", "text", "output format: text or json")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	replicas := fs.Int("nats-replicas", 1, "servers of a JetStream cluster that store each bucket publish creates (3 or 5 keep every acknowledged write when a server dies); a bucket that exists keeps its own")
	printPerms := fs.Bool("print-permissions", false, "print the nats-server accounts configuration in which the controller writes and each machine named as an argument reads the roster and its own declaration only; publish nothing")
	return func(ctx context.Context, args []string) (int, error) {
		if *printPerms {
			return printPermissions(env, *nf.prefix, args)
		}
		if len(args) > 0 {
			return exitUsage, usagef("unexpected arguments %q: machines are named only with --print-permissions", args)
		}
		if *url == "" {
			*url = env.getenv("MESHHOST_NATS_URL")
		}
		if *url == "" {
			return exitUsage, errors.New("no NATS server: pass --nats nats://HOST:4222")
		}
		if *rosterPath == "" && len(decls) == 0 {
			return exitUsage, errors.New("nothing to publish: pass --roster FILE and/or --declaration FILE")
		}

		// Everything is read and checked before anything is written.
		roster, parsed, err := readPublished(*rosterPath, decls)
		if err != nil {
			return 1, err
		}

		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		nc, err := nf.server(*url, "meshhost publish").Connect()
		if err != nil {
			return 1, err
		}
		defer nc.Close()
		p, err := natssource.NewPublisher(nc, natssource.LayoutFor(*nf.prefix))
		if err != nil {
			return 1, err
		}
		// Each step is retried while the servers cannot answer for now (a
		// cluster electing a stream leader), until --timeout.
		if err := natssource.Retry(ctx, func(ctx context.Context) error { return p.EnsureReplicatedBuckets(ctx, *replicas) }); err != nil {
			return 1, err
		}
		type machineResult struct {
			Machine    string `json:"machine"`
			Generation uint64 `json:"generation"`
			Revision   uint64 `json:"revision"`
		}
		out := struct {
			Roster   natssource.Result `json:"roster"`
			Machines []machineResult   `json:"machines"`
		}{Machines: []machineResult{}}
		// The roster first: a container declared next may need a new name.
		if err := natssource.Retry(ctx, func(ctx context.Context) (err error) { out.Roster, err = p.PublishRoster(ctx, roster); return err }); err != nil {
			return 1, fmt.Errorf("publishing the roster: %w", err)
		}
		for _, d := range parsed {
			var rev uint64
			err := natssource.Retry(ctx, func(ctx context.Context) (err error) { rev, err = p.PublishDeclaration(ctx, d); return err })
			if err != nil {
				return 1, fmt.Errorf("publishing the declaration of %s: %w", d.Machine, err)
			}
			out.Machines = append(out.Machines, machineResult{d.Machine, d.Generation, rev})
		}
		if *output == "json" {
			return 0, json.NewEncoder(env.stdout).Encode(out)
		}
		r := out.Roster
		if r.Unchanged {
			fmt.Fprintf(env.stdout, "roster generation %d: committed already, unchanged\n", r.Generation)
		} else {
			fmt.Fprintf(env.stdout, "roster generation %d (was %d): %d names, %d set, %d removed, committed through revision %d (%d bytes written)\n",
				r.Generation, r.Previous, r.Names, r.Set, r.Removed, r.Revision, r.Bytes)
		}
		for _, m := range out.Machines {
			fmt.Fprintf(env.stdout, "declaration of %s: generation %d at revision %d\n", m.Machine, m.Generation, m.Revision)
		}
		return 0, nil
	}
}
