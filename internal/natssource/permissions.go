package natssource

import (
	"fmt"
	"regexp"
	"strings"
)

// InboxPrefix is the inbox prefix of the watcher of a machine: the
// subjects its consumers deliver to and the JetStream API answers it. A
// machine may subscribe to its own inbox alone (see Permissions), so that
// no machine receives what is delivered to another: with the default
// "_INBOX", any client allowed "_INBOX.>" would read every machine's
// declaration as the server pushes it.
func InboxPrefix(machine string) string { return "_MESHHOST_INBOX." + machine }

// machineRE is spec's rule for machine names: one subject token, no
// wildcard, no dot.
var machineRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Users of the permission layout.
const (
	// ControllerUser is the user that publishes (meshhost publish).
	ControllerUser = "meshhost-controller"
	// ControllerPasswordVar holds the controller's password, or its bcrypt
	// hash, in the server's environment.
	ControllerPasswordVar = "MESHHOST_NATS_CONTROLLER_PASSWORD"
)

// MachineUser is the user of machine's agent.
func MachineUser(machine string) string { return "machine-" + machine }

// MachinePasswordVar is the environment variable that holds machine's
// password (or its bcrypt hash) for the server:
// MESHHOST_NATS_MACHINE_<MACHINE>_PASSWORD, uppercase, "-" as "_".
func MachinePasswordVar(machine string) string {
	return "MESHHOST_NATS_MACHINE_" + strings.ToUpper(strings.ReplaceAll(machine, "-", "_")) + "_PASSWORD"
}

// MachinePermissions is what the agent of machine may do: read the
// roster, and its own declaration, and nothing else.
//
//	publish (requests to the JetStream API, and flow control answers):
//	  $JS.API.STREAM.INFO.KV_<roster>, $JS.API.STREAM.INFO.KV_<machines>
//	  $JS.API.DIRECT.GET.KV_<roster>, $JS.API.DIRECT.GET.KV_<roster>.>
//	  $JS.API.STREAM.MSG.GET.KV_<roster>
//	  $JS.API.DIRECT.GET.KV_<machines>.$KV.<machines>.<machine>
//	  $JS.API.CONSUMER.CREATE.KV_<roster>, ...CREATE.KV_<roster>.>
//	  $JS.API.CONSUMER.CREATE.KV_<machines>.*.$KV.<machines>.<machine>
//	  $JS.API.CONSUMER.DELETE.KV_<roster>.*, ...DELETE.KV_<machines>.*
//	  $JS.FC.KV_<roster>.>, $JS.FC.KV_<machines>.>
//	subscribe:
//	  InboxPrefix(machine).>
//
// A consumer of the machines bucket can be created only through the API
// subject that names its filter, and the server refuses a consumer whose
// filter is not the one its subject names: so the only consumer a machine
// can create there reads its own key. There is no write: no $KV subject
// is published, no stream or consumer of another kind is made, no core
// subscription reads a value as the controller writes it. What a machine
// can learn of others is the machines bucket's stream info: which keys
// (machine names) it holds and how many revisions, never a value.
func MachinePermissions(l Layout, machine string) (publish, subscribe []string) {
	r, m := "KV_"+l.Roster, "KV_"+l.Machines
	api := "$JS.API."
	publish = []string{
		api + "STREAM.INFO." + r,
		api + "STREAM.INFO." + m,
		api + "DIRECT.GET." + r,
		api + "DIRECT.GET." + r + ".>",
		api + "STREAM.MSG.GET." + r,
		api + "DIRECT.GET." + m + ".$KV." + l.Machines + "." + machine,
		api + "CONSUMER.CREATE." + r,
		api + "CONSUMER.CREATE." + r + ".>",
		api + "CONSUMER.CREATE." + m + ".*.$KV." + l.Machines + "." + machine,
		api + "CONSUMER.DELETE." + r + ".*",
		api + "CONSUMER.DELETE." + m + ".*",
		"$JS.FC." + r + ".>",
		"$JS.FC." + m + ".>",
	}
	return publish, []string{InboxPrefix(machine) + ".>"}
}

// ControllerPermissions is what the controller may do: the JetStream API
// (it creates the buckets), writes to both buckets, flow control and
// acknowledgements of its own reads, and answers on the default inbox.
func ControllerPermissions(l Layout) (publish, subscribe []string) {
	return []string{"$JS.API.>", "$JS.FC.>", "$JS.ACK.>", "$KV." + l.Roster + ".>", "$KV." + l.Machines + ".>"},
		[]string{"_INBOX.>"}
}

// Permissions returns a nats-server configuration (accounts block) in
// which the controller writes the buckets of l and each machine of
// machines reads the roster and its own declaration only. It is a whole
// server configuration file, or a part to include in one. Passwords come
// from the server's environment (ControllerPasswordVar,
// MachinePasswordVar), as plain text or bcrypt hashes.
func Permissions(l Layout, machines []string) ([]byte, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, m := range machines {
		if !machineRE.MatchString(m) {
			return nil, fmt.Errorf("machine %q: want lowercase letters, digits and '-', 1 to 63 characters, starting and ending with a letter or digit", m)
		}
		if seen[m] {
			return nil, fmt.Errorf("machine %q is named twice", m)
		}
		seen[m] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# meshhost: NATS permissions for buckets %s and %s (meshhost publish --print-permissions).\n", l.Roster, l.Machines)
	b.WriteString("# The controller writes; each machine reads the roster and its own declaration only.\n")
	b.WriteString("# Passwords (plain, or bcrypt hashes from `nats server passwd`) come from the server's environment.\n")
	b.WriteString("# Agents connect as nats://machine-NAME:PASSWORD@HOST:4222; meshhost publish as meshhost-controller.\n")
	b.WriteString("accounts {\n  MESHHOST {\n    jetstream: enabled\n    users: [\n")
	pub, sub := ControllerPermissions(l)
	writeUser(&b, ControllerUser, ControllerPasswordVar, pub, sub)
	for _, m := range machines {
		pub, sub := MachinePermissions(l, m)
		writeUser(&b, MachineUser(m), MachinePasswordVar(m), pub, sub)
	}
	b.WriteString("    ]\n  }\n}\n")
	return []byte(b.String()), nil
}

func writeUser(b *strings.Builder, user, passwordVar string, pub, sub []string) {
	fmt.Fprintf(b, "      {\n        user: %q\n        password: $%s\n        permissions: {\n", user, passwordVar)
	fmt.Fprintf(b, "          publish: {allow: %s}\n", subjectList(pub))
	fmt.Fprintf(b, "          subscribe: {allow: %s}\n", subjectList(sub))
	b.WriteString("        }\n      }\n")
}

func subjectList(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
