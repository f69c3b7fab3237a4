package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/meshhost/meshhost/internal/agent/declsource"
)

// pushFlags are who may use the agent's push endpoint: --push-token-file
// for a TCP endpoint, --push-allow-uid for a unix socket.
type pushFlags struct {
	tokenFile string
	uids      []uint32
}

func (p *pushFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.tokenFile, "push-token-file", "", "a `FILE` holding the bearer token a TCP --push endpoint requires (Authorization: Bearer TOKEN); owned by root, mode 0600, at least 16 characters; required with --push ip:port")
	fs.Func("push-allow-uid", "`UID` that may use a unix socket --push besides root and the agent's own user (SO_PEERCRED); repeatable", func(v string) error {
		u, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("%q is not a uid", v)
		}
		p.uids = append(p.uids, uint32(u))
		return nil
	})
}

// access checks the flags against the endpoint addr (as --push gives it;
// "" is the default unix socket) and returns its Access.
func (p *pushFlags) access(addr string) (declsource.Access, error) {
	a, key, err := p.check(addr)
	if err != nil {
		return a, fmt.Errorf("--%s: %w", key, err)
	}
	return a, nil
}

// check is access, its fault naming the flag at fault (key).
func (p *pushFlags) check(addr string) (a declsource.Access, key string, err error) {
	unix := addr == "" || strings.HasPrefix(addr, "unix:")
	switch {
	case addr == "off":
		return declsource.Access{}, "", nil
	case unix && p.tokenFile != "":
		return declsource.Access{}, "push-token-file", errors.New("is for a TCP --push endpoint (ip:port); a unix socket admits root and --push-allow-uid")
	case unix:
		return declsource.Access{AllowUIDs: p.uids}, "", nil
	case len(p.uids) > 0:
		return declsource.Access{}, "push-allow-uid", errors.New("is for a unix socket --push endpoint; a TCP endpoint admits the holders of --push-token-file")
	case p.tokenFile == "":
		return declsource.Access{}, "push", fmt.Errorf("%s: a TCP push endpoint needs --push-token-file FILE (root's, mode 0600: umask 077; head -c 32 /dev/urandom | base64 > /etc/meshhost/push.token), or use a unix socket (--push unix:/path.sock)", addr)
	}
	tok, err := declsource.ReadToken(p.tokenFile)
	if err != nil {
		return declsource.Access{}, "push-token-file", err
	}
	return declsource.Access{Token: tok}, "", nil
}

// pushToken returns the token a client of the push endpoint at addr sends:
// none for a unix socket, tokenFile's (declsource.ReadToken) for TCP.
func pushToken(addr, tokenFile string) ([]byte, error) {
	if strings.HasPrefix(addr, "unix:") {
		if tokenFile != "" {
			return nil, errors.New("--push-token-file is for a TCP --push endpoint (ip:port)")
		}
		return nil, nil
	}
	if tokenFile == "" {
		return nil, fmt.Errorf("--push %s: a TCP push endpoint needs the agent's token: give --push-token-file FILE", addr)
	}
	tok, err := declsource.ReadToken(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--push-token-file: %w", err)
	}
	return tok, nil
}
