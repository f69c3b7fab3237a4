# meshhost: `make test` sets up this machine (podman, runc, busybox, dig) and
# runs every test; see README.md.

SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

# The podman v5 bindings need these tags to build without C libraries; only
# reconcile/podman imports them, but one set of flags serves every package.
TAGS := remote,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,containers_image_openpgp
export GOFLAGS := -tags=$(TAGS)

FUZZTIME ?= 30s

.PHONY: test vet demo fuzz fuzz-short build

# build: meshhost; meshhost-resolver (`meshhost resolver` without the podman
# client, for running the resolver alone); and the static probe binary the
# migration gate imports into its probe image (no libc there: CGO_ENABLED=0).
build:
	CGO_ENABLED=0 go build -o bin/meshhost ./cmd/meshhost
	CGO_ENABLED=0 go build -o bin/meshhost-resolver ./cmd/meshhost-resolver
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/meshprobe ./cmd/meshprobe

# demo: the incident replayed on the embedded in-memory runtime (no podman).
# CGO_ENABLED=0, as meshhost is built: no C toolchain or headers needed.
demo:
	CGO_ENABLED=0 go run ./cmd/meshhost demo

vet:
	go vet ./...

# test: everything, against a real podman service. scripts/podman-up installs
# and starts it when missing and prints the environment the tests read.
# Packages run one at a time (-p 1, after a parallel build): agents under test
# probe every network on the machine and bind gateways' port 53, so tests of
# different packages sharing one podman would otherwise disturb each other.
test:
	@set -euo pipefail; \
	eval "$$(scripts/podman-up)"; \
	echo "podman: $$MESHHOST_PODMAN_SOCKET"; \
	eval "$$(scripts/nats-up)"; \
	go vet ./...; \
	CGO_ENABLED=1 go test -race -count=1 -run '^$$' ./... >/dev/null; \
	CGO_ENABLED=1 go test -race -count=1 -p 1 -timeout 40m ./...; \
	MESHHOST_DISRUPTIVE=1 CGO_ENABLED=1 go test -count=1 -run 'TestDisruptive' ./cmd/meshhost/; \
	$(MAKE) --no-print-directory fuzz-short

# fuzz: each fuzz target for FUZZTIME (default 30s); fuzz-short is CI's brief run.
fuzz:
	@scripts/fuzz $(FUZZTIME)

fuzz-short:
	@scripts/fuzz 5s
