package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// termOpts are the flags of the terminal and process-control verbs.
type termOpts struct {
	literal, paste, enter bool
	screen                bool          // send --screen
	settle, reactBound    time.Duration // send --settle, --timeout; 0: the daemon's default
	scrollback            int
	regex                 string
	quiet                 time.Duration
	input                 bool
	timeout               time.Duration
	readOnly              bool
	detachKeys            string
}

func init() {
	commands = append(commands,
		&command{
			name: "send", args: "ID KEY... [-l] [--paste] [--enter] [--screen [--settle D] [--timeout D]]", summary: "type keys into a terminal process", minArgs: 2, maxArgs: -1,
			help: `Sends keys to a process's terminal, in order. Each KEY is a tmux key name:
Enter, Tab, BSpace, Escape, Space, Up, Down, Left, Right, Home, End,
PageUp, PageDown, F1..F12, or a single character, with C- (control), M-
(meta) and S- (shift) prefixes: "C-c", "M-x". An unknown name is refused
and nothing is sent. -l sends the arguments as literal text (joined by
spaces); --paste pastes them (bracketed when the program asked for it);
--enter presses Enter after either. Every form needs a terminal process.
ID may be a unique prefix of 8 or more characters, as everywhere in the
operator commands.

--screen then prints the screen (as screen does) once the program
reacted, in the same request: reacted means it printed something after
the keys were written and the screen rendered it. That is the first
output (an echo), not a finished redraw: for a command's result use wait
--for or --quiet, then screen. A program that prints nothing within
--settle of the keys (default 20ms; stty -echo, a silent key) gets the
screen as it is then; so does one whose output the screen is still
rendering when --timeout passes (default 2s), with a note on stderr.
Neither is an error. --json prints written, reaction (output, quiet,
timeout) and the screen.`,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.BoolVar(&o.term.literal, "l", false, "send the arguments as literal text")
				fs.BoolVar(&o.term.paste, "paste", false, "paste the arguments as text")
				fs.BoolVar(&o.term.enter, "enter", false, "press Enter after the text (with -l or --paste)")
				fs.BoolVar(&o.term.screen, "screen", false, "print the screen once the program reacted")
				fs.DurationVar(&o.term.settle, "settle", 0, "with --screen: no output for `duration` after the keys means no reaction (default 20ms)")
				fs.DurationVar(&o.term.reactBound, "timeout", 0, "with --screen: print the screen as it is after `duration` (default 2s)")
			},
			run: runSend,
		},
		&command{
			name: "screen", args: "ID [--scrollback N]", summary: "print a terminal process's screen", minArgs: 1, maxArgs: 1,
			help: `Prints the rendered screen of a terminal process as text (what a person
would see; trailing blank rows dropped), with --scrollback N lines that
scrolled off above it. --json prints rows, cursor, modes, title and the
logs cursor just after the output shown.`,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.IntVar(&o.term.scrollback, "scrollback", 0, "include up to `N` scrolled-off lines")
			},
			run: runScreen,
		},
		&command{
			name: "wait", args: "ID [--for REGEX | --quiet D | --input] [--timeout D]", summary: "wait for a process's output, silence, input-wait or exit", minArgs: 1, maxArgs: 1,
			help: `Blocks until the process exits, or with --for until its output (stdout,
or --stderr) after --cursor (default: from now) matches the RE2 REGEX,
with --quiet until it printed nothing for D, with --input until it blocks
reading its input (a prompt). Prints which fired and the logs cursor
after it. Bounded by --timeout (default 30s; the host caps it at 60s):
then it exits 1 with wait-timeout. A condition that can no longer happen
(the process exited without a match) fails at once with closed.`,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.StringVar(&o.term.regex, "for", "", "wait for output matching this RE2 `regex`")
				fs.DurationVar(&o.term.quiet, "quiet", 0, "wait for `duration` without output")
				fs.BoolVar(&o.term.input, "input", false, "wait until the process blocks reading its input")
				fs.DurationVar(&o.term.timeout, "timeout", 30*time.Second, "give up after `duration`")
				fs.StringVar(&o.cursor, "cursor", "", "match output after this logs `cursor` (with --for)")
				fs.BoolVar(&o.stderr, "stderr", false, "match stderr instead of stdout (with --for)")
			},
			run: runWait,
		},
		&command{
			name: "signal", args: "ID SIG", summary: "send a signal to a process's tree", minArgs: 2, maxArgs: 2,
			help: "Sends SIG (term, hup, int, usr1, usr2, stop, cont, kill; SIGTERM and TERM work too) to the process's whole tree. stop and cont pause and resume it.",
			run:  runSignal,
		},
		&command{
			name: "rm", args: "ID", summary: "release (forget) an exited process", minArgs: 1, maxArgs: 1,
			help: "Forgets an exited process: its ID, exit and logs are gone. A running process is refused: stop it first.",
			run:  runRm,
		},
		attachCommand(),
	)
}

func runSend(e *env, o *opts, args []string) error {
	id := args[0]
	req, err := inputRequest(o.term, args[1:])
	if err != nil {
		return err
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	r, err := c.InputScreen(e.ctx, id, req)
	if err != nil {
		return err
	}
	switch {
	case e.g.json:
		return printJSON(e.stdout, r)
	case r.Screen == nil:
		return nil
	}
	printScreen(e, *r.Screen)
	if r.Reaction == api.ReactionTimeout {
		fmt.Fprintln(e.stderr, "note: the bound (--timeout) passed before the screen showed the reaction: this is the screen as it was")
	}
	return nil
}

// inputRequest is send's request: its keys, text or paste, and --screen.
func inputRequest(t termOpts, rest []string) (api.InputRequest, error) {
	var req api.InputRequest
	switch {
	case !t.screen && (t.settle != 0 || t.reactBound != 0):
		return req, usagef("--settle and --timeout go with --screen")
	case t.settle < 0 || t.reactBound < 0:
		return req, usagef("--settle and --timeout want a duration >= 0")
	case t.screen:
		req.Screen = true
		if t.settle > 0 {
			ms := t.settle.Milliseconds()
			req.SettleMS = &ms
		}
		if t.reactBound > 0 {
			ms := t.reactBound.Milliseconds()
			req.TimeoutMS = &ms
		}
	}
	switch {
	case t.literal && t.paste:
		return req, usagef("-l and --paste exclude each other")
	case t.literal:
		req.Keys = []api.Key{{Text: strings.Join(rest, " ")}}
		if t.enter {
			req.Keys = append(req.Keys, api.Key{Name: "Enter"})
		}
	case t.paste:
		text := strings.Join(rest, " ")
		req.Paste, req.Submit = &text, t.enter
	default:
		if t.enter {
			return req, usagef("--enter goes with -l or --paste (name Enter as a key otherwise)")
		}
		for _, k := range rest {
			req.Keys = append(req.Keys, api.Key{Name: k})
		}
	}
	return req, nil
}

// screenText is the visible rows, trailing blank rows dropped.
func screenText(lines []string) string {
	n := len(lines)
	for n > 0 && lines[n-1] == "" {
		n--
	}
	return strings.Join(lines[:n], "\n")
}

func runScreen(e *env, o *opts, args []string) error {
	if o.term.scrollback < 0 {
		return usagef("--scrollback %d: want a line count >= 0", o.term.scrollback)
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	s, err := c.Screen(e.ctx, args[0], o.term.scrollback)
	if err != nil {
		return err
	}
	if e.g.json {
		return printJSON(e.stdout, s)
	}
	printScreen(e, s)
	return nil
}

// printScreen prints a screen as text: its scrollback, the rows, and a
// note on stderr when it misses output.
func printScreen(e *env, s api.Screen) {
	for _, l := range s.Scrollback {
		fmt.Fprintln(e.stdout, l)
	}
	if t := screenText(s.Lines); t != "" {
		fmt.Fprintln(e.stdout, t)
	}
	if s.BehindBytes > 0 || s.SkippedBytes > 0 {
		fmt.Fprintf(e.stderr, "note: %d bytes not yet rendered, %d lost before rendering (capsule-host logs has the raw output)\n", s.BehindBytes, s.SkippedBytes)
	}
}

func runWait(e *env, o *opts, args []string) error {
	t := o.term
	req := api.WaitForRequest{TimeoutMS: t.timeout.Milliseconds()}
	n := 0
	if t.regex != "" {
		req.Regex, req.Cursor, n = &t.regex, o.cursor, n+1
		if o.stderr {
			req.Stream = "stderr"
		}
	}
	if t.quiet > 0 {
		ms := t.quiet.Milliseconds()
		req.QuietMS, n = &ms, n+1
	}
	if t.input {
		req.Input, n = true, n+1
	}
	switch {
	case n > 1:
		return usagef("give at most one of --for, --quiet and --input")
	case n == 0:
		req.Exit = true
	case t.timeout < 0:
		return usagef("--timeout %s: want a duration >= 0", t.timeout)
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	r, err := c.WaitFor(e.ctx, args[0], req)
	if err != nil {
		return err
	}
	if e.g.json {
		return printJSON(e.stdout, r)
	}
	fmt.Fprintf(e.stdout, "%s\ncursor %s\n", r.Fired, r.Cursor)
	return nil
}

func runSignal(e *env, _ *opts, args []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	return c.Signal(e.ctx, args[0], args[1])
}

func runRm(e *env, _ *opts, args []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	return c.Release(e.ctx, args[0])
}

// reapText is ps's REAP column: when the host will end the process and
// by which rule ("idle 29m59s"), "-" when it will not (exited).
func reapText(p api.Process) string {
	if p.ReapInMS == nil || p.ReapRule == "" {
		return "-"
	}
	return p.ReapRule + " " + ago(*p.ReapInMS)
}

// commandLine is the command and its arguments as ps shows them.
func commandLine(p api.Process) string {
	if len(p.Args) == 0 {
		return p.Command
	}
	return p.Command + " " + strings.Join(p.Args, " ")
}
