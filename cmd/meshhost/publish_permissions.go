package main

import (
	"github.com/meshhost/meshhost/internal/natssource"
)

// printPermissions prints the nats-server configuration in which the
// controller writes the buckets of prefix and each machine of machines
// reads the roster and its own declaration only (natssource.Permissions).
func printPermissions(env *environment, prefix string, machines []string) (int, error) {
	if len(machines) == 0 {
		return exitUsage, usagef("--print-permissions: name the machines: meshhost publish --print-permissions MACHINE...")
	}
	conf, err := natssource.Permissions(natssource.LayoutFor(prefix), machines)
	if err != nil {
		return exitUsage, usagef("--print-permissions: %v", err)
	}
	_, err = env.stdout.Write(conf)
	return 0, err
}
