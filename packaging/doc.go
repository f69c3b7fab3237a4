// Package packaging holds what ships meshhost and what on-call watches it
// with: the Debian package's nfpm configuration (nfpm.yaml) and maintainer
// scripts (deb/), the Prometheus alert rules and their unit tests
// (prometheus/), and the Grafana dashboard (grafana/). Its tests check that
// every metric the rules and the dashboard name is one the binaries
// actually export.
package packaging
