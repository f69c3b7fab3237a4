// Package systemd holds meshhost's systemd units; its tests check them with
// systemd-analyze verify and for the directives DNS continuity rests on.
package systemd
