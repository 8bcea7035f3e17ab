//go:build !leanclient

package main

import (
	"io"
	"log/slog"
	"strings"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/config"
)

func init() { newTCP = api.NewTCP }

// newLogger builds the daemon's slog logger: text for people, JSON with
// --log-json or log.json.
func newLogger(w io.Writer, g *globals, cfg *config.Config) (*slog.Logger, error) {
	lvl := cfg.Log.Level
	if g.logLevel != "" {
		lvl = g.logLevel
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(lvl))); err != nil {
		return nil, usagef("log level %q: want debug, info, warn or error", lvl)
	}
	o := &slog.HandlerOptions{Level: l}
	// Every handler is wrapped so no process ID reaches the log, whoever
	// writes it (see daemon.RedactHandler).
	if g.logJSON || cfg.Log.JSON {
		return slog.New(daemon.NewRedactHandler(slog.NewJSONHandler(w, o))), nil
	}
	return slog.New(daemon.NewRedactHandler(slog.NewTextHandler(w, o))), nil
}

// hostEngines lists the engines compiled in (tests use it to tell the
// build legs apart).
func hostEngines() []string { return host.Engines() }
