package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

func init() {
	commands = append(commands,
		&command{
			name: "call", args: "CAPSULE TOOL [JSON|-] [--principal P]", summary: "call a tool of a capsule",
			help: `Sends one tool call to the daemon and prints the tool's output (JSON is
pretty-printed). The input is a JSON object (default {}); "-" reads it from
stdin. --principal names who the call acts for; persistent processes
belong to (capsule, principal), and another principal gets no-such-process.
Without --principal the call runs as the capsule's owner-fallback
principal, which cannot hold persistent processes. Over --tcp the token
decides the principal.

A tool that returns an error prints "tool-error: ..." on stderr and exits 1.
With --json the whole answer is printed, including the pooled instance
that served the call.`,
			minArgs: 2, maxArgs: 3,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.StringVar(&o.principal, "principal", "", "`principal` the call acts for")
			},
			run: runCall,
		},
		&command{
			name: "capsules", args: "", summary: "list the loaded capsules", maxArgs: 0,
			help: "Lists each loaded capsule with its version and number of tools, then the capsule directories that failed to load (with the error, and the version still serving in their place, if any).",
			run:  runCapsules,
		},
		&command{
			name: "tools", args: "CAPSULE", summary: "list a capsule's tools and input schemas", minArgs: 1, maxArgs: 1,
			help: "Lists the tools of one capsule with their descriptions. --json includes each tool's JSON Schema.",
			run:  runTools,
		},
		&command{
			name: "ps", args: "[--principal P] [--capsule C]", summary: "list persistent processes (operator view, all principals)", maxArgs: 0,
			help: `The operator view of the process registry, across principals: ID, capsule,
principal, label, phase, exit, age and command. Over --tcp only the
token's principal is visible. The ID is a capability: whoever holds it can
read and stop the process through the operator commands.`,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.StringVar(&o.principal, "principal", "", "only this `principal`")
				fs.StringVar(&o.capsule, "capsule", "", "only this `capsule`")
			},
			run: runPS,
		},
		&command{
			name: "inspect", args: "ID", summary: "show everything known about one process", minArgs: 1, maxArgs: 1,
			help: "Prints one process's info: owner, phase, exit and reason, age, idle time, buffered and dropped bytes, stdin, CPU and memory peak where the backend measures them.",
			run:  runInspect,
		},
		&command{
			name: "logs", args: "ID [--stderr|--merged] [-f] [--tail N] [--since D] [--timestamps] [--cursor C] [--max N]", summary: "print a process's output (without draining it)", minArgs: 1, maxArgs: 1,
			help: logsHelp,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.BoolVar(&o.stderr, "stderr", false, "read stderr instead of stdout")
				fs.BoolVar(&o.follow, "f", false, "follow: keep printing until the process exits")
				fs.BoolVar(&o.follow, "follow", false, "same as -f")
				fs.StringVar(&o.cursor, "cursor", "", "start at this `cursor` (from an earlier --json read)")
				fs.IntVar(&o.max, "max", 0, "read at most `N` bytes (without -f)")
				o.logs.register(fs)
			},
			run: runLogs,
		},
		&command{
			name: "stop", args: "ID [--grace D]", summary: "stop a process: SIGTERM, then SIGKILL after the grace period", minArgs: 1, maxArgs: 1,
			help: `Stops a process gracefully: SIGTERM to its whole process tree, then
SIGKILL after --grace (default: the host's stop_grace; capped by
stop_grace_cap). Prints the exit. Stopping an exited process prints its
exit again.`,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.StringVar(&o.grace, "grace", "", "grace `duration` before SIGKILL, e.g. 2s")
			},
			run: runStop,
		},
	)
}

func runCall(e *env, o *opts, args []string) error {
	in := "{}"
	if len(args) == 3 {
		in = args[2]
		if in == "-" {
			b, err := io.ReadAll(io.LimitReader(e.stdin, 8<<20))
			if err != nil {
				return fmt.Errorf("reading the input from stdin: %w", err)
			}
			in = string(b)
		}
	}
	input, err := parseJSONArg(in)
	if err != nil {
		return err
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	res, err := c.Call(e.ctx, api.CallRequest{Capsule: args[0], Tool: args[1], Input: input, Principal: o.principal})
	var ae *api.Error
	if errors.As(err, &ae) && o.principal == "" && e.g.tcp == "" && strings.Contains(ae.Message, "persist-unsupported") {
		ae.Message += "\n(the call named no principal, so it ran as the capsule's owner-fallback principal, which cannot hold persistent processes: pass --principal NAME)"
	}
	if err != nil {
		return err
	}
	if e.g.json {
		return printJSON(e.stdout, res)
	}
	return printOutput(e.stdout, res.Output)
}

// printOutput prints a tool's output: a JSON string as its text, other JSON
// indented.
func printOutput(w io.Writer, out json.RawMessage) error {
	var s string
	if json.Unmarshal(out, &s) == nil {
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		_, err := io.WriteString(w, s)
		return err
	}
	var b bytes.Buffer
	if json.Indent(&b, out, "", "  ") != nil {
		b.Reset()
		b.Write(out)
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

func runCapsules(e *env, o *opts, _ []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	caps, fail, err := c.CapsulesAndFailures(e.ctx)
	if err != nil {
		return err
	}
	if e.g.json {
		return printJSON(e.stdout, api.CapsuleList{Capsules: caps, Failed: fail})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tTOOLS")
	for _, cp := range caps {
		names := make([]string, 0, len(cp.Tools))
		for _, t := range cp.Tools {
			names = append(names, t.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d (%s)\n", cp.Name, cp.Version, len(cp.Tools), strings.Join(names, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(fail) == 0 {
		return nil
	}
	fmt.Fprintln(e.stdout)
	tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAILED\tDIR\tSERVING\tKIND\tERROR")
	for _, f := range fail {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", dash(f.Name), f.Dir, dash(f.Serving), f.Kind, oneLine(f.Error))
	}
	return tw.Flush()
}

// oneLine folds a multi-line error (errors.Join) onto one table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func runTools(e *env, o *opts, args []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	cp, err := c.Capsule(e.ctx, args[0])
	if err != nil {
		return err
	}
	if e.g.json {
		return printJSON(e.stdout, cp)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tDESCRIPTION")
	for _, t := range cp.Tools {
		fmt.Fprintf(tw, "%s\t%s\n", t.Name, firstLine(t.Description))
	}
	return tw.Flush()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func runPS(e *env, o *opts, _ []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	l, err := c.ProcessList(e.ctx, o.capsule, o.principal)
	if err != nil {
		return err
	}
	if len(l.Unreachable) > 0 {
		fmt.Fprintf(e.stderr, "capsule-host: cluster nodes not answering, their processes are missing: %s\n", strings.Join(l.Unreachable, ", "))
	}
	if e.g.json {
		return printJSON(e.stdout, l)
	}
	ps := l.Processes
	node := func(api.Process) string { return "" } // a NODE column in cluster mode only
	if slices.ContainsFunc(ps, func(p api.Process) bool { return p.Node != "" }) {
		node = func(p api.Process) string { return dash(p.Node) + "\t" }
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\t"+node(api.Process{Node: "NODE"})+"CAPSULE\tPRINCIPAL\tLABEL\tPHASE\tEXIT\tAGE\tREAP\tCOMMAND")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, node(p), p.Capsule, p.Principal, dash(p.Label), p.Phase,
			api.ExitText(p.Exit), ago(p.AgeMS), reapText(p), abbreviate(commandLine(p), 60))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ago formats milliseconds the way people read ages: 850ms, 12s, 3m4s, 2h5m.
func ago(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Truncate(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Truncate(time.Second).String(), "0s")
	}
	return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
}

func runInspect(e *env, o *opts, args []string) error {
	c, err := client(e)
	if err != nil {
		return err
	}
	p, err := c.Process(e.ctx, args[0])
	if err != nil {
		return err
	}
	if e.g.json {
		return printJSON(e.stdout, p)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("ID", p.ID)
	row("Log ID", p.LogID)
	row("Capsule", p.Capsule)
	row("Principal", p.Principal)
	row("Label", dash(p.Label))
	row("Command", p.Command)
	pid := "-"
	if p.PID != nil {
		pid = fmt.Sprint(*p.PID)
	}
	row("PID", pid)
	row("Phase", p.Phase)
	row("Exit", api.ExitText(p.Exit))
	row("Reason", dash(p.Reason))
	row("Age", ago(p.AgeMS))
	row("Idle", ago(p.IdleMS))
	row("Buffered", fmt.Sprintf("%d bytes", p.BufferedBytes))
	row("Dropped", fmt.Sprintf("%d bytes", p.BytesDropped))
	row("Stdin open", fmt.Sprint(p.StdinOpen))
	cpu, mem := "unknown", "unknown"
	if p.CPUMS != nil {
		cpu = (time.Duration(*p.CPUMS) * time.Millisecond).String()
	}
	if p.MemPeakBytes != nil {
		mem = fmt.Sprintf("%d bytes", *p.MemPeakBytes)
	}
	row("CPU", cpu)
	row("Memory peak", mem)
	return tw.Flush()
}

func runLogs(e *env, o *opts, args []string) error {
	if o.logs.lineMode() {
		return runLogLines(e, o, args[0])
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	q := api.LogQuery{Stream: "stdout", Cursor: o.cursor, Max: o.max}
	if o.stderr {
		q.Stream = "stderr"
	}
	id := args[0]
	if !o.follow {
		ch, err := c.Logs(e.ctx, id, q)
		if err != nil {
			return err
		}
		if e.g.json {
			return printJSON(e.stdout, ch)
		}
		if ch.BytesDropped > 0 {
			fmt.Fprintf(e.stderr, "capsule-host logs: %d bytes were lost before this output (log limits)\n", ch.BytesDropped)
		}
		_, err = e.stdout.Write(ch.Data)
		return err
	}
	// Following is a long operation: say so, and on a terminal keep a live
	// status line on stderr while the process is quiet.
	tty := isTerminal(e.stderr)
	p, err := c.Process(e.ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "following %s of process %s (%s, %s); Ctrl-C stops following, not the process\n", q.Stream, p.LogID, p.Capsule, p.Principal)
	start := time.Now()
	status := false
	var total int
	err = c.Follow(e.ctx, id, q, func(ch api.LogChunk) error {
		if status {
			fmt.Fprint(e.stderr, "\r\033[K")
			status = false
		}
		if ch.BytesDropped > 0 {
			fmt.Fprintf(e.stderr, "capsule-host logs: %d bytes were lost here (log limits)\n", ch.BytesDropped)
		}
		if e.g.json {
			if err := json.NewEncoder(e.stdout).Encode(ch); err != nil {
				return err
			}
		} else if _, err := e.stdout.Write(ch.Data); err != nil {
			return err
		}
		total += len(ch.Data)
		if len(ch.Data) == 0 && !ch.EOF && tty {
			fmt.Fprintf(e.stderr, "… waiting for output (%s, %d bytes so far)", time.Since(start).Truncate(time.Second), total)
			status = true
		}
		return nil
	})
	if status {
		fmt.Fprint(e.stderr, "\r\033[K")
	}
	if err == context.Canceled {
		fmt.Fprintf(e.stderr, "stopped following; the process keeps running\n")
		return nil
	}
	if err != nil {
		return err
	}
	if p2, err := c.Process(context.WithoutCancel(e.ctx), id); err == nil {
		fmt.Fprintf(e.stderr, "process %s ended: %s\n", p.LogID, api.ExitText(p2.Exit))
	} else {
		fmt.Fprintf(e.stderr, "process %s ended\n", p.LogID)
	}
	return nil
}

func runStop(e *env, o *opts, args []string) error {
	var grace *time.Duration
	if o.grace != "" {
		g, err := time.ParseDuration(o.grace)
		if err != nil || g < 0 {
			return usagef("--grace %q: want a duration like 2s", o.grace)
		}
		grace = &g
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	id := args[0]
	gtxt := "host default"
	if grace != nil {
		gtxt = grace.String()
	}
	p, err := c.Process(e.ctx, id)
	if err != nil {
		return err
	}
	// A stop may wait out its whole grace period: show it is working.
	fmt.Fprintf(e.stderr, "stopping process %s (%s, %s): SIGTERM, then SIGKILL after %s…\n", p.LogID, p.Capsule, p.Principal, gtxt)
	done := make(chan struct{})
	if isTerminal(e.stderr) {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			start := time.Now()
			for {
				select {
				case <-done:
					fmt.Fprint(e.stderr, "\r\033[K")
					return
				case <-t.C:
					fmt.Fprintf(e.stderr, "\r… waiting for the process to exit (%s)", time.Since(start).Truncate(time.Second))
				}
			}
		}()
	}
	ex, err := c.Stop(e.ctx, id, grace)
	close(done)
	if err != nil {
		return err
	}
	if e.g.json {
		return printJSON(e.stdout, api.StopResponse{Exit: ex})
	}
	fmt.Fprintf(e.stdout, "stopped %s: %s\n", p.LogID, api.ExitText(&ex))
	return nil
}

// logsHelp is the help of logs (its line flags are cmd_logs.go).
const logsHelp = `Prints a process's stdout (or --stderr) from the oldest retained byte, or
from --cursor. Reading never drains: any number of readers see the same
output. -f follows until the process exits (Ctrl-C stops following, not
the process). Bytes lost to the log limits are reported on stderr.
--json prints each chunk as JSON (data is base64) with the next cursor.

The line flags work on lines, each timed by when its first byte was
captured (the daemon records a time per write; very old bytes keep a
coarser, earlier time): --tail N prints the last N lines, --since 10m
(or an RFC 3339 time) only lines captured since, --timestamps prefixes
each line with its capture time ("-" when unknown), and --merged
interleaves stdout and stderr in capture order (each stream keeps its own
order; lines captured in the same millisecond may interleave either way).
With -f they apply to what is retained, then new lines follow.`
