package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/meshhost/meshhost/internal/agent"
	"github.com/meshhost/meshhost/internal/resolvercmd"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
)

// agentResolver is the resolver the agent feeds: the embedded one, in
// this process, or a resolver service's control socket. It is what the
// agent, the exposer and the prober take of it.
type agentResolver interface {
	agent.Resolver
	migrations.Resolver
	// Busy reports whether queries wait in this process's sockets
	// (specjson.Reader.Busy): a declaration read yields to them.
	Busy() bool
	// Alive reports, without blocking, whether the resolver answers.
	Alive() error
	// Canary is the address the resolver answers for a probe's canary.
	Canary(ctx context.Context, nonce string) (netip.Addr, error)
	// Settle drops what an earlier agent exposed and this one did not.
	Settle() error
	// Static are the addresses the resolver always serves (--listen).
	Static() []netip.AddrPort
	// Reload is SIGHUP's: put again what the resolver should hold.
	Reload()
	Close() error
}

// openResolver opens the resolver, first of all: it serves the saved
// roster before the controller or the runtime answer anything. Embedded,
// it is this process's; a service's, it runs on its own, and the agent
// only feeds it (its watchers run in g).
func openResolver(ctx context.Context, g *errgroup.Group, c *agentConfig, logger *slog.Logger, reg prometheus.Registerer, depUp *prometheus.GaugeVec) (agentResolver, error) {
	if c.External != "" {
		return openResolverService(ctx, g, c, logger, depUp), nil
	}
	rcfg := resolver.Config{
		Logger: logger, Registerer: reg, Upstreams: c.Upstreams, Allow: c.Allow,
		StatePath: c.State.Roster(),
		Forbidden: resolver.PodmanDNSGuard(),
	}
	c.Cache.Apply(&rcfg)
	srv, err := resolver.New(rcfg)
	if err != nil {
		return nil, err
	}
	e := &embeddedResolver{Server: srv, stopFlush: resolvercmd.FlushOnSignal(ctx, srv)}
	for _, l := range c.Listens {
		if err := srv.Listen(l); err != nil {
			e.Close()
			return nil, fmt.Errorf("--listen %s: %w", l, err)
		}
	}
	if r := srv.Roster(); r != nil {
		logger.Info("serving the saved roster", "roster_generation", r.Generation, "names", len(r.Names))
	}
	depUp.WithLabelValues("resolver").Set(1)
	if c.Runtime == "podman" {
		logger.Warn("the resolver runs in the agent's process: containers in resolve mode lose DNS whenever the agent stops or restarts; run meshhost-resolver and pass --resolver unix:PATH (docs/architecture.md)")
	}
	return e, nil
}

// embeddedResolver is the resolver in the agent's process: it answers
// while the process does.
type embeddedResolver struct {
	*resolver.Server
	stopFlush func()
}

func (e *embeddedResolver) Alive() error { return nil }
func (e *embeddedResolver) Canary(_ context.Context, nonce string) (netip.Addr, error) {
	return resolver.CanaryAddress(nonce), nil
}
func (e *embeddedResolver) Settle() error            { return nil } // nothing outlived the agent
func (e *embeddedResolver) Static() []netip.AddrPort { return e.Listeners() }
func (e *embeddedResolver) Reload()                  {}
func (e *embeddedResolver) Close() error {
	e.stopFlush()
	return e.Server.Close()
}

// serviceResolver is a resolver service, fed through its control socket.
type serviceResolver struct {
	*control.Client
	static []netip.AddrPort
	depUp  *prometheus.GaugeVec
}

// openResolverService connects to the resolver service's control socket
// and puts the operator's own addresses and clients at once; a resolver
// not up yet gets them when it is (Watch puts them again).
func openResolverService(ctx context.Context, g *errgroup.Group, c *agentConfig, logger *slog.Logger, depUp *prometheus.GaugeVec) *serviceResolver {
	client := control.NewClient(control.ClientConfig{Path: c.External, Logger: logger})
	s := &serviceResolver{Client: client, static: c.Listens, depUp: depUp}
	g.Go(func() error { client.Watch(ctx, time.Second); return nil })
	g.Go(func() error { // the metric follows the resolver, probed or not
		every(ctx, time.Second, func() { s.Alive() })
		return nil
	})
	for _, l := range c.Listens {
		if err := client.Listen(l); err != nil {
			logger.Warn("--listen: the resolver does not serve it yet", "addr", l, "err", err)
		}
	}
	if len(c.Allow) > 0 {
		client.SetAllow(c.Allow)
	}
	if err := client.Ping(2 * time.Second); err != nil {
		logger.Error("the resolver's control socket does not answer; serving nothing new until it does (the resolver, a process of its own, keeps answering containers)", "socket", c.External, "err", err)
	}
	return s
}

func (s *serviceResolver) Busy() bool { return false } // its queries are not this process's

// Alive asks the service, and sets the resolver's dependency metric.
func (s *serviceResolver) Alive() error {
	_, err := s.Client.Alive()
	if err != nil {
		s.depUp.WithLabelValues("resolver").Set(0)
	} else {
		s.depUp.WithLabelValues("resolver").Set(1)
	}
	return err
}

func (s *serviceResolver) Static() []netip.AddrPort { return s.static }
func (s *serviceResolver) Reload()                  { s.Client.Sync() }
func (s *serviceResolver) Close() error             { return nil } // the service runs on
