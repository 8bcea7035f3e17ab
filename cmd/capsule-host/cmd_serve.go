//go:build !leanclient

package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/host/config"
)

func init() {
	commands = append(commands, &command{
		name: "serve", args: "[flags]", summary: "run the daemon: load capsules and answer the API on a unix socket",
		help: `Loads the capsules of the host config (with no config: the bundled
capsules, the local backend, the socket only) and answers the HTTP/JSON API
on a unix socket created with mode 0600. The default socket is
$XDG_RUNTIME_DIR/capsule-host/capsule-host.sock, else
<state dir>/capsule-host.sock. An optional loopback TCP listener with bearer
tokens is enabled by [tcp] listen in the config.

Persistent processes live in a keeper process, not in the daemon: a crash,
restart or upgrade of serve does not end them. Before the first call, serve
takes the state directory's lock (a second daemon on it is refused, naming
the holder), opens the journal (<state dir>/journal.db) and re-adopts every
journaled process; one that ended meanwhile reports its real exit, and a
process no record owns is terminated and logged.

A capsule that fails to load is logged and listed by "capsules"; the
daemon serves the others (it refuses to start only when every configured
capsule fails). While the capsules compile at start (seconds on a cold
cache) the socket answers already: health says "loading" with the
progress and each capsule's state, every other request fails with
"loading N of M capsules" (clients pass --wait DURATION to wait instead),
and the log shows each capsule as it compiles. SIGHUP, like "capsule-host reload", re-reads the config's
capsule directories and the bundled set and reloads what changed, keeping
every process.

--watch (development) polls the capsule directories every --watch-poll
and reloads a capsule once its manifest or module changed and held still
for one poll (a rebuild renames the module, then pins the manifest): its
processes keep running. A rebuild that does not load (a broken module, a
stale pin) leaves the previous version serving; the error is logged and
listed by "capsules".

On SIGTERM or SIGINT the daemon stops accepting calls, lets in-flight calls
finish for shutdown_grace (then cancels them), and then, by
[processes] on_shutdown (or --on-shutdown): "keep" (default) leaves every
persistent process running for the next daemon, "stop" stops them all.
Either way it logs each one, removes the socket, and exits 0.`,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.StringVar(&o.stateDir, "state-dir", "", "state `dir` (overrides the config's state_dir)")
			fs.StringVar(&o.onShutdown, "on-shutdown", "", "`keep` or stop persistent processes when serve stops (overrides [processes] on_shutdown)")
			fs.BoolVar(&o.salvage, "salvage-journal", false, "start on a damaged journal: keep the file aside and every record that can be read")
			o.cluster.register(fs)
			fs.BoolVar(&o.watch, "watch", false, "development mode: reload a capsule when its directory's manifest or module changes, keeping its processes")
			fs.DurationVar(&o.watchPoll, "watch-poll", daemon.DefaultWatchPoll, "how often --watch looks at the capsule directories")
		},
		run: runServe,
	})
}

func runServe(e *env, o *opts, _ []string) error {
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	if o.stateDir != "" {
		cfg.SetStateDir(o.stateDir)
	}
	if e.g.socket != "" {
		cfg.Socket = e.g.socket
	}
	o.cluster.apply(cfg)
	if o.onShutdown != "" {
		if o.onShutdown != config.OnShutdownKeep && o.onShutdown != config.OnShutdownStop {
			return &usageError{msg: fmt.Sprintf("--on-shutdown %q: want keep or stop", o.onShutdown)}
		}
		cfg.Processes.OnShutdown = o.onShutdown
	}
	lg, err := newLogger(e.stderr, e.g, cfg)
	if err != nil {
		return err
	}
	if err := daemon.CheckEngine(pick(e.g.engine, cfg.Engine)); err != nil {
		return err
	}
	sock, err := daemon.ListenSocket(cfg.Socket)
	if err != nil {
		return err
	}
	var tcp net.Listener
	if cfg.TCP.Listen != "" {
		tcp, err = net.Listen("tcp", cfg.TCP.Listen)
		if err != nil {
			sock.Close()
			return fmt.Errorf("listening on %s: %w", cfg.TCP.Listen, err)
		}
	}
	// SIGHUP reloads the capsules. Notified before Open, so a hang-up
	// while capsules compile is kept for Serve instead of killing the
	// daemon (never signal.Ignore: an ignored signal stays ignored in
	// every process the daemon starts).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reconfig := func() (*config.Config, error) { return loadConfig(e) }
	// While the capsules compile, clients get "loading N of M capsules"
	// (or wait with --wait) instead of a connection nobody accepts.
	progress := &daemon.Progress{}
	stopLoading := daemon.ServeLoading(progress, binVersion(), lg, sock, tcp)
	rt, err := daemon.Open(e.ctx, cfg, daemon.Options{Engine: e.g.engine, Bundled: bundledFS, Version: binVersion(), Log: lg,
		Reconfig: reconfig, Hangup: hup, SalvageJournal: o.salvage, Watch: watchPoll(o), Progress: progress})
	stopLoading()
	if err != nil {
		sock.Close()
		if tcp != nil {
			tcp.Close()
		}
		return err
	}
	return daemon.Serve(e.ctx, rt, sock, tcp, cfg.ShutdownGrace.D())
}

func pick(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// watchPoll is the watch interval serve passes to the daemon (0: off).
func watchPoll(o *opts) time.Duration {
	if !o.watch || o.watchPoll <= 0 {
		return 0
	}
	return o.watchPoll
}
