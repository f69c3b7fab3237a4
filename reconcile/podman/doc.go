// Package podman is meshhost's one podman adapter, over a podman API service
// socket: its Runtime is the reconciler's (reconcile.Runtime) and the
// migrations' (migrations.Runtime: networks, one-shot probe containers, the
// probe image, probe containers left behind). It is the only package of
// meshhost that imports the podman Go bindings, so that everything else
// builds without podman's build tags (remote exclude_graphdriver_btrfs
// exclude_graphdriver_devicemapper containers_image_openpgp).
//
// Create gives podman exactly the settings of a spec.Rendered: copy mode's
// hosts become --add-host entries ("name:addr"), which podman writes first
// in /etc/hosts, in order; resolve mode's DNS configuration becomes the
// container's whole /etc/resolv.conf (search, nameserver, options lines, as
// spec.Rendered.ResolvConf). Create never pulls an image.
//
// Inspect maps what podman reports back to spec's vocabulary. Podman adds
// settings of its own, which Inspect reports as podman does rather than
// guessing which were declared:
//
//   - env: the image's env (PATH=...), container=podman and, once started,
//     HOSTNAME=<short id>; podman 4 also containers.conf's default env
//     (TERM=xterm), podman 5 instead HOME once started;
//   - labels: the image's labels;
//   - command and entrypoint: the image's, when the declaration leaves them
//     empty; working dir "/" when neither declaration nor image sets one;
//   - networks: the default network "podman" when none is given; addresses
//     only while the container runs, and podman does not say whether an
//     address was requested (static) or assigned; the container's short ID
//     as an alias, which Inspect drops;
//   - ports: the host port podman picked, for a declared host port of 0;
//   - capabilities: CapAdd and CapDrop against podman's default set (CAP_
//     spelled), which is not reported as added; the bounding set held is
//     in Inspected.Capabilities. Podman 5's default set lacks MKNOD,
//     NET_RAW and AUDIT_WRITE, so a declared drop of those is not reported
//     there (reconcile's adoption judges by what is held);
//   - healthcheck: an image's HEALTHCHECK, when the declaration has none.
//
// Resources at zero mean unlimited in spec: Create asks podman for an
// unlimited pids limit explicitly (podman's own default is containers.conf's
// pids_limit, 2048); a container created elsewhere with podman's default
// reports PidsLimit 2048.
//
// Podman quirks the adapter works around or documents, found against real
// services with the v5 bindings: 4.3.1 (Debian 12's, BoltDB) and 5.4.2
// (Debian 13's, SQLite; and on a BoltDB database made by podman 4):
//
//   - Inspect's Config.Entrypoint is one space-joined string in the v4 API,
//     which the v5 bindings split on spaces ("sh -c 'a b'" comes back as
//     four words). Inspect rebuilds the entrypoint from Path and Args less
//     Cmd instead, which is exact.
//   - List reports StartedAt in whole seconds; Inspect has nanoseconds.
//   - Tmpfs mounts are reported in HostConfig.Tmpfs, not in Mounts.
//   - A create whose name is taken fails with HTTP 500 ("that name is
//     already in use"), a rename with 409 ("container already exists") on
//     BoltDB but with HTTP 500 and SQLite's own "UNIQUE constraint failed:
//     ContainerConfig.Name" on SQLite; all become reconcile.ErrNameInUse.
//     A missing image is HTTP 500 on 4.3 and 404 on 5: neither is
//     ErrNotFound, which is for containers only.
//   - Without systemd podman cannot schedule healthchecks (4.3 logs
//     "unable to get systemd connection to add healthchecks", 5.4 nothing,
//     and start succeeds) and the health stays "starting" for ever. RunHealthchecks
//     makes Inspect run a running container's healthcheck itself. The
//     answer of a healthcheck run is that run's result only ("unhealthy"
//     after one failure); the container's health, which honours Retries and
//     the start period, is read by inspecting it afterwards.
//   - Before podman 5.1 an update is volatile: `podman update` changes the
//     running container's cgroup, but Inspect keeps reporting the limits it
//     was created with and the next start (a restart policy, a reboot, a
//     stop and start) puts those back. 5.1 made updates persistent (podman
//     PR 22322); KeepsUpdates says which the service is. Podman 4.3's
//     `podman update` CLI cannot set the pids limit; the API can.
//   - The bindings send a request up to three times when the connection
//     fails (connection.go, DoRequest), creates included: a create whose
//     reply was lost can come back as ErrNameInUse although it created the
//     container (read in the bindings' code, not seen happen).
package podman
