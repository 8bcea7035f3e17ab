// Command capsule-host runs WebAssembly tool capsules for AI agents.
//
//	capsule-host serve                 run the daemon (HTTP/JSON on a unix socket)
//	capsule-host call CAPSULE TOOL ... make a tool call through the daemon
//	capsule-host demo                  a one-process story with the bundled shell capsule
//
// Run `capsule-host help` for every command. Exit codes: 0 success,
// 1 the operation failed, 2 usage error, 3 no daemon reachable.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = ""

// Exit codes, the same for every command.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitUnreachable = 3
)

func main() {
	// A re-executed copy of this binary may be a backend's helper (the
	// local exec helper, the OCI monitor): the one explicit entry point.
	if reexec.Init() {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is what a command runs with; tests substitute buffers.
type env struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	g              *globals
	cmd            *command
}

// globals are flags every command accepts, before or after its name.
type globals struct {
	socket   string
	json     bool
	config   string
	logJSON  bool
	logLevel string
	engine   string
	tcp      string
	wait     time.Duration
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.socket, "socket", "", "daemon socket `path` (default: $CAPSULE_HOST_SOCKET, the config's socket, or the XDG default)")
	fs.BoolVar(&g.json, "json", false, "print JSON for machines instead of a table")
	fs.StringVar(&g.config, "config", "", "host config `file` (default: $CAPSULE_HOST_CONFIG or ~/.config/capsule-host/capsule-host.toml if present)")
	fs.BoolVar(&g.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.StringVar(&g.logLevel, "log-level", "", "log `level`: debug, info, warn, error")
	fs.StringVar(&g.engine, "engine", "", "wasm `engine`: wazero (default) or wasmtime (build with -tags wasmtime)")
	fs.DurationVar(&g.wait, "wait", 0, "wait up to `duration` for a daemon that is still starting (loading its capsules) instead of failing with \"loading N of M capsules\"")
	fs.StringVar(&g.tcp, "tcp", "", "reach the daemon's loopback TCP `addr` instead of the socket (token from $CAPSULE_HOST_TOKEN)")
}

// merge copies the flags set in o over g.
func (g *globals) merge(o *globals) {
	for _, p := range []struct{ dst, src *string }{{&g.socket, &o.socket}, {&g.config, &o.config}, {&g.logLevel, &o.logLevel}, {&g.engine, &o.engine}, {&g.tcp, &o.tcp}} {
		if *p.src != "" {
			*p.dst = *p.src
		}
	}
	if o.wait != 0 {
		g.wait = o.wait
	}
	g.json = g.json || o.json
	g.logJSON = g.logJSON || o.logJSON
}

// command is one subcommand.
type command struct {
	name    string
	args    string // usage synopsis after the name
	summary string
	help    string // longer description
	flags   func(fs *flag.FlagSet, o *opts)
	// minArgs/maxArgs bound the positional arguments (maxArgs -1: any).
	minArgs, maxArgs int
	run              func(e *env, o *opts, args []string) error
}

// opts holds every command's own flags (each command registers the few it
// uses).
type opts struct {
	principal string
	capsule   string
	stderr    bool
	follow    bool
	grace     string
	cursor    string
	max       int
	all       bool
	list      bool
	witOut    string
	stateDir  string
	keep      bool
	check     bool
	// serve
	onShutdown string
	salvage    bool
	cluster    clusterFlags // cmd_nodes.go
	watch      bool
	watchPoll  time.Duration
	// new
	sdk, module, lang string
	term              termOpts // cmd_term.go
	logs              logsOpts // cmd_logs.go
}

var commands []*command

// fallback, when set (the lean client build, lean.go), runs every command
// this binary does not link, and help, with the original arguments.
var fallback func(args []string, stderr io.Writer) int

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError is a mistake in the command line: exit 2 with a hint.
type usageError struct {
	msg string
	err error // the typed cause, for errors.Is (nil for most)
}

func (u *usageError) Error() string { return u.msg }

func (u *usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// exitError carries a specific exit code with a message already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{}
	root := flag.NewFlagSet("capsule-host", flag.ContinueOnError)
	root.SetOutput(io.Discard)
	g.register(root)
	help := root.Bool("help", false, "")
	root.BoolVar(help, "h", false, "")
	showVersion := root.Bool("version", false, "")
	if err := root.Parse(args); err != nil {
		fmt.Fprintf(stderr, "capsule-host: %v\n\n", err)
		printUsage(stderr)
		return exitUsage
	}
	rest := root.Args()
	if fallback != nil && (*help || *showVersion || len(rest) == 0 || rest[0] == "help" || lookup(rest[0]) == nil) {
		return fallback(args, stderr)
	}
	if *showVersion {
		rest = append([]string{"version"}, rest...)
	}
	if *help || len(rest) == 0 {
		if len(rest) == 0 && !*help {
			printUsage(stderr)
			return exitUsage
		}
		printUsage(stdout)
		return exitOK
	}
	name := rest[0]
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "capsule-host: unknown command %q\n\n", name)
		printUsage(stderr)
		return exitUsage
	}
	o := &opts{}
	fs := flag.NewFlagSet("capsule-host "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// Globals after the command name land in sub and override those given
	// before it (registering into g again would reset g to the defaults).
	sub := &globals{}
	sub.register(fs)
	if c.flags != nil {
		c.flags(fs, o)
	}
	chelp := fs.Bool("help", false, "show help")
	fs.BoolVar(chelp, "h", false, "show help")
	pos, err := parseInterleaved(fs, rest[1:])
	if err != nil {
		fmt.Fprintf(stderr, "capsule-host %s: %v\n", c.name, err)
		fmt.Fprintf(stderr, "usage: capsule-host %s %s\nRun 'capsule-host %s -h' for help.\n", c.name, c.args, c.name)
		return exitUsage
	}
	if *chelp {
		printCommandHelp(stdout, c, fs)
		return exitOK
	}
	g.merge(sub)
	if fallback != nil && g.tcp != "" {
		// The lean client has no TCP transport (net/http): the full one does.
		return fallback(args, stderr)
	}
	if len(pos) < c.minArgs || (c.maxArgs >= 0 && len(pos) > c.maxArgs) {
		fmt.Fprintf(stderr, "capsule-host %s: wrong number of arguments\n", c.name)
		fmt.Fprintf(stderr, "usage: capsule-host %s %s\nRun 'capsule-host %s -h' for help.\n", c.name, c.args, c.name)
		return exitUsage
	}
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, g: g, cmd: c}
	return report(e, c.run(e, o, pos))
}

// report prints err (if any) on stderr and returns the exit code.
func report(e *env, err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	var ee *exitError
	var ae *api.Error
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "capsule-host %s: %s\n", e.cmd.name, ue.msg)
		fmt.Fprintf(e.stderr, "usage: capsule-host %s %s\n", e.cmd.name, e.cmd.args)
		return exitUsage
	case errors.Is(err, api.ErrUnreachable):
		fmt.Fprintf(e.stderr, "capsule-host %s: %v\nStart the daemon with `capsule-host serve`, or pass --socket PATH if it listens elsewhere.\n", e.cmd.name, err)
		return exitUnreachable
	case errors.As(err, &ae):
		if e.g.json {
			b, _ := json.Marshal(api.ErrorResponse{Error: api.ErrorBody{Code: ae.Code, Message: ae.Message, ToolCode: ae.ToolCode}})
			fmt.Fprintf(e.stderr, "%s\n", b)
		} else {
			code := ae.Code
			if ae.ToolCode != "" {
				code += " (" + ae.ToolCode + ")"
			}
			fmt.Fprintf(e.stderr, "capsule-host %s: %s: %s\n", e.cmd.name, code, ae.Message)
		}
		return exitFailed
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(e.stderr, "capsule-host %s: interrupted\n", e.cmd.name)
		return exitFailed
	}
	fmt.Fprintf(e.stderr, "capsule-host %s: %v\n", e.cmd.name, err)
	return exitFailed
}

// parseInterleaved lets flags follow positional arguments
// (`call shell tool '{}' --principal alice`), as users expect; "--" ends
// flag parsing.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "capsule-host runs WebAssembly tool capsules for AI agents, with persistent\nprocesses that outlive the pooled instance that started them.\n\n")
	fmt.Fprintf(w, "Usage:\n  capsule-host [global flags] COMMAND [flags] [args]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	groups := []struct {
		title string
		names []string
	}{
		{"Daemon", []string{"serve"}},
		{"Client (talk to the daemon)", []string{"call", "capsules", "reload", "tools", "ps", "inspect", "logs", "stop", "nodes", "mcp"}},
		{"Terminals and process control", []string{"attach", "send", "screen", "wait", "signal", "rm"}},
		{"Local", []string{"demo", "new", "validate", "pin", "wit", "version", "token"}},
	}
	for _, gr := range groups {
		fmt.Fprintf(tw, "  %s:\n", gr.title)
		for _, n := range gr.names {
			if c := lookup(n); c != nil {
				fmt.Fprintf(tw, "    %s\t%s\n", c.name, c.summary)
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nGlobal flags:\n")
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	(&globals{}).register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\nExit codes: 0 success, 1 the operation failed, 2 usage error, 3 no daemon reachable.\nRun 'capsule-host help COMMAND' or 'capsule-host COMMAND -h' for a command's help.\n")
}

func printCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: capsule-host %s %s\n\n%s\n", c.name, c.args, c.summary)
	if c.help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.help))
	}
	global := map[string]bool{}
	gfs := flag.NewFlagSet("", flag.ContinueOnError)
	(&globals{}).register(gfs)
	gfs.VisitAll(func(f *flag.Flag) { global[f.Name] = true })
	var own []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !global[f.Name] && f.Name != "h" && f.Name != "help" {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		sort.Slice(own, func(i, j int) bool { return own[i].Name < own[j].Name })
		sub := flag.NewFlagSet("", flag.ContinueOnError)
		for _, f := range own {
			sub.Var(f.Value, f.Name, f.Usage)
		}
		sub.SetOutput(w)
		sub.PrintDefaults()
	}
	fmt.Fprintf(w, "\nGlobal flags (--socket, --json, --config, --log-json, --log-level, --engine, --tcp, --wait): see 'capsule-host help'.\n")
}

// binVersion is the version string: the -X value, else the module version
// from the build info, else "dev".
func binVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// printJSON writes v indented, for --json.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// isTerminal reports whether w is a character device (progress lines are
// redrawn only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func init() {
	commands = append(commands, &command{
		name: "help", args: "[COMMAND]", summary: "show help for capsule-host or a command", maxArgs: 1,
		run: func(e *env, o *opts, args []string) error {
			if len(args) == 0 {
				printUsage(e.stdout)
				return nil
			}
			c := lookup(args[0])
			if c == nil {
				return usagef("unknown command %q", args[0])
			}
			fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
			(&globals{}).register(fs)
			if c.flags != nil {
				c.flags(fs, &opts{})
			}
			printCommandHelp(e.stdout, c, fs)
			return nil
		},
	})
}
