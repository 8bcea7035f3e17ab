package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host/config"
)

// loadConfig finds the host config: --config, else $CAPSULE_HOST_CONFIG,
// else the XDG path if that file exists, else the built-in defaults.
func loadConfig(e *env) (*config.Config, error) {
	path := e.g.config
	explicit := path != ""
	if path == "" {
		path = os.Getenv("CAPSULE_HOST_CONFIG")
		explicit = path != ""
	}
	if path == "" {
		path = config.DefaultPath()
	}
	if path != "" {
		c, err := config.Load(path)
		if err == nil {
			return c, nil
		}
		if explicit || !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return config.Default(), nil
}

// socketPath is where the client looks for the daemon: --socket, else
// $CAPSULE_HOST_SOCKET, else the config's socket (which defaults the same
// way serve does).
func socketPath(e *env) (string, error) {
	if e.g.socket != "" {
		return e.g.socket, nil
	}
	if s := os.Getenv("CAPSULE_HOST_SOCKET"); s != "" {
		return s, nil
	}
	c, err := loadConfig(e)
	if err != nil {
		return "", err
	}
	return c.Socket, nil
}

// newTCP makes the loopback TCP client (net/http); the lean client build
// does not link it (common_full.go sets it).
var newTCP func(addr, token string) *api.Client

// client returns an API client for the daemon: loopback TCP with
// $CAPSULE_HOST_TOKEN when --tcp is given, else the unix socket. With
// --wait it first waits, bounded, for a starting daemon to be ready.
func client(e *env) (*api.Client, error) {
	c, err := dial(e)
	if err != nil || e.g.wait <= 0 {
		return c, err
	}
	if _, err := c.WaitReady(e.ctx, e.g.wait); err != nil {
		return nil, err
	}
	return c, nil
}

// dial makes the client client returns.
func dial(e *env) (*api.Client, error) {
	if e.g.tcp != "" {
		tok := os.Getenv("CAPSULE_HOST_TOKEN")
		if tok == "" {
			return nil, usagef("--tcp needs the bearer token in $CAPSULE_HOST_TOKEN (never on the command line, where ps would show it)")
		}
		if newTCP == nil { // the lean build hands --tcp to the full binary before this
			return nil, usagef("--tcp needs the full binary")
		}
		return newTCP(e.g.tcp, tok), nil
	}
	p, err := socketPath(e)
	if err != nil {
		return nil, err
	}
	return api.NewUnix(p), nil
}

// parseJSONArg checks a JSON argument early, so a shell-quoting mistake
// is a usage error here, not a tool error later.
func parseJSONArg(s string) ([]byte, error) {
	b := []byte(strings.TrimSpace(s))
	if len(b) == 0 {
		return []byte("{}"), nil
	}
	if !json.Valid(b) {
		return nil, usagef("input is not valid JSON: %s", abbreviate(s, 60))
	}
	return b, nil
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
