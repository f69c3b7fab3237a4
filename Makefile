# meshhost: `make test` sets up this machine (podman, runc, busybox, dig) and
# runs every test; see README.md.

SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

# The podman v5 bindings need these tags to build without C libraries; only
# reconcile/podman imports them, but one set of flags serves every package.
TAGS := remote,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,containers_image_openpgp
export GOFLAGS := -tags=$(TAGS)

FUZZTIME ?= 30s

# VERSION is the tree's `git describe` (scripts/version); every binary is
# stamped with it and the commit (meshhost version, meshhost_build_info).
VERSION ?= $(shell scripts/version)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILDINFO := github.com/meshhost/meshhost/internal/plumbing/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT)

.PHONY: test vet demo fuzz fuzz-short bench-smoke build deb release-tests man sim sim-mutants

# build: meshhost; meshhost-resolver (`meshhost resolver` without the podman
# client, for running the resolver alone); and the static probe binary the
# migration gate imports into its probe image (no libc there: CGO_ENABLED=0).
build:
	CGO_ENABLED=0 go build -ldflags='$(LDFLAGS)' -o bin/meshhost ./cmd/meshhost
	CGO_ENABLED=0 go build -ldflags='$(LDFLAGS)' -o bin/meshhost-resolver ./cmd/meshhost-resolver
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w $(LDFLAGS)' -o bin/meshprobe ./cmd/meshprobe

# deb: dist/meshhost_VERSION_amd64.deb, its binaries static, stripped and
# stamped, and dist/SHA256SUMS (scripts/deb; `make deb VERSION=v1.2.4`
# names the build). Reproducible: the same commit gives the same bytes.
deb:
	VERSION=$(VERSION) COMMIT=$(COMMIT) scripts/deb

# release-tests: the alert rules' unit tests (promtool); the package
# installed, upgraded and purged on this machine, built twice to the same
# bytes, and clean to lintian --pedantic (scripts/release-tests).
release-tests:
	@scripts/release-tests

# demo: the incident replayed on the embedded in-memory runtime (no podman).
# CGO_ENABLED=0, as meshhost is built: no C toolchain or headers needed.
demo:
	CGO_ENABLED=0 go run ./cmd/meshhost demo

# man: a man page per command, written from the commands themselves
# (man/meshhost.1, man/meshhost-plan.1, ..., the daemons' man/meshhost-agent.8
# and man/meshhost-resolver.8): what --help says. meshprobe(1) and
# agent.toml(5) are written by hand, in packaging/man.
man:
	CGO_ENABLED=0 go run ./cmd/meshhost man --dir man

vet:
	go vet ./...

# PODMAN lists the podman services the tests run against, one after the
# other: 4 is the host's (Debian 12's 4.3), 5 is podman 5.4 from Debian 13's
# packages, side by side with it (scripts/podman-up --podman N installs and
# starts each when missing). The first gets every test, each further one
# the tests that talk to podman: `make test PODMAN=5` runs everything
# against podman 5 alone.
PODMAN ?= 4 5

# test: everything, against real podman services (see PODMAN and
# scripts/podman-tests). Packages run one at a time (-p 1, after a parallel
# build): agents under test probe every network on the machine and bind
# gateways' port 53, so tests of different packages sharing one podman would
# otherwise disturb each other.
test:
	@set -euo pipefail; \
	eval "$$(scripts/nats-up)"; \
	go vet ./...; \
	CGO_ENABLED=1 go test -race -count=1 -run '^$$' ./... >/dev/null; \
	scripts/podman-tests $(PODMAN); \
	scripts/release-tests; \
	eval "$$(scripts/podman-up)"; \
	$(MAKE) --no-print-directory bench-smoke fuzz-short

# bench-smoke: every benchmark once, so that one which no longer runs (a
# limit it outgrew, an API it missed) fails the build, not the next person
# who measures. The figures of one iteration mean nothing. `make test` runs
# it against the host's podman service (the podman benchmarks need one, and
# under CI=true fail without it).
bench-smoke:
	@set -o pipefail; go test -run '^$$' -bench . -benchtime 1x ./... | grep -E '^(ok|FAIL|--- |panic)'

# fuzz: each fuzz target for FUZZTIME (default 30s); fuzz-short is CI's brief run.
fuzz:
	@scripts/fuzz $(FUZZTIME)

fuzz-short:
	@scripts/fuzz 5s

# sim: the deterministic simulation of one machine (internal/testkit/sim)
# for SEEDS seeds from SEED_FIRST; a failure prints its seed and the
# command that replays it. `make test` runs it too, for its default
# -sim.duration (100s, plus the seed in progress: about two minutes under -race). sim-mutants breaks each
# rule of internal/testkit/sim/testdata/mutants.txt on purpose, one at a
# time on a scratch copy of the tree, and says which the simulation caught
# (SIM_DURATION each, default 60s).
SEEDS ?= 1000
SEED_FIRST ?= 1
sim:
	go test -count=1 -p 1 -timeout 0 ./internal/testkit/sim -run '^TestSim$$' -sim.seeds $(SEEDS) -sim.first $(SEED_FIRST) -v

sim-mutants:
	@scripts/sim-mutants
