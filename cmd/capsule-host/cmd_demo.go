//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/config"
)

func init() {
	commands = append(commands, &command{
		name: "demo", args: "", summary: "a one-minute story: a persistent process across pooled instances", maxArgs: 0,
		help: `Runs in this one process on the embedded defaults, with nothing to
configure, and tells a short story with the bundled shell capsule:

  1. alice starts a ticking script as a persistent process;
  2. alice reads its logs twice, with a cursor, from different pooled
     instances;
  3. bob presents the same ID and gets no-such-process;
  4. alice stops it and sees the exit.

State lives in a temporary directory, removed at the end (--keep keeps it).
Exits 0 when every step behaved as described.`,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.BoolVar(&o.keep, "keep", false, "keep the temporary state directory")
		},
		run: runDemo,
	})
}

// The ticking script: one line every 200 ms, so each read has news.
const demoScript = `i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 0.2; done`

func runDemo(e *env, o *opts, _ []string) error {
	if bundledFS == nil {
		return errors.New("this binary has no bundled capsules (capsules/embed.go); build it from the repository")
	}
	tmp, err := os.MkdirTemp("", "capsule-host-demo-")
	if err != nil {
		return err
	}
	if o.keep {
		defer fmt.Fprintf(e.stdout, "state kept in %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	cfg := config.Default()
	cfg.SetStateDir(tmp)
	cfg.CallTimeout = config.Duration(20 * time.Second)
	cfg.Processes.OnShutdown = config.OnShutdownStop // a demo leaves nothing running
	lvl := slog.LevelWarn
	if e.g.logLevel == "debug" {
		lvl = slog.LevelDebug
	}
	var h slog.Handler = slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl})
	if e.g.logJSON {
		h = slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: lvl})
	}
	lg := slog.New(daemon.NewRedactHandler(h))
	ctx := e.ctx
	rt, err := daemon.Open(ctx, cfg, daemon.Options{Engine: e.g.engine, Bundled: bundledFS, Version: binVersion(), Log: lg})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	}()
	d := &demo{w: e.stdout, rt: rt, ctx: ctx}
	return d.run(tmp)
}

type demo struct {
	w   io.Writer
	rt  *daemon.Runtime
	ctx context.Context
}

func (d *demo) say(format string, a ...any) { fmt.Fprintf(d.w, format+"\n", a...) }

// call runs one tool call as principal and returns the decoded output
// and the instance that served it.
func (d *demo) call(principal, tool string, in map[string]any) (map[string]any, uint64, error) {
	b, _ := json.Marshal(in)
	ctx := host.WithPrincipal(d.ctx, principal)
	res, err := d.rt.Host.Call(ctx, "shell", tool, string(b))
	if err != nil {
		return nil, 0, err
	}
	out := map[string]any{}
	if err := json.Unmarshal([]byte(res.Output), &out); err != nil {
		return nil, res.Instance, fmt.Errorf("shell.%s returned %q, not a JSON object", tool, abbreviate(res.Output, 80))
	}
	return out, res.Instance, nil
}

// run is the demo's story, one step per function; each step's error
// names the step.
func (d *demo) run(tmp string) error {
	d.say("capsule-host demo: a persistent process outlives the pooled instance that started it")
	d.say("engine %s · capsule shell · state in %s (temporary)", d.rt.Engine, tmp)
	d.say("")
	id, err := d.spawn()
	if err != nil {
		return err
	}
	for _, step := range []func(string) error{d.reads, d.otherPrincipal, d.stop} {
		if err := step(id); err != nil {
			return err
		}
		d.say("")
	}
	d.say("done. Try it as a daemon: capsule-host serve, then capsule-host call shell spawn_background_process '{\"command\":\"...\"}' --principal alice")
	return nil
}

// spawn is step 1: alice starts the ticker; it returns the process ID.
func (d *demo) spawn() (string, error) {
	d.say("1. alice asks the shell capsule to start a ticking script as a persistent process")
	d.say("   $ %s", demoScript)
	out, inst, err := d.call("alice", "spawn_background_process", map[string]any{"command": demoScript, "label": "ticker"})
	if err != nil {
		return "", fmt.Errorf("step 1 (spawn): %w", err)
	}
	id := str(out, "id", "process_id")
	if id == "" {
		return "", fmt.Errorf("step 1 (spawn): no id in %v", out)
	}
	d.say("   spawn_background_process ran on instance #%d", inst)
	d.say("   process ID %s…%s (52 characters, 256 random bits; logs show only its hash %s)", id[:6], id[len(id)-4:], d.rt.Registry.LogID(id))
	d.say("")
	return id, nil
}

// reads is step 2: two reads with a cursor, on different instances.
func (d *demo) reads(id string) error {
	d.say("2. alice reads its output twice, continuing from a cursor; each call may land on any pooled instance")
	time.Sleep(700 * time.Millisecond)
	first, inst1, err := d.call("alice", "read_process_logs", map[string]any{"id": id})
	if err != nil {
		return fmt.Errorf("step 2 (first read): %w", err)
	}
	cursor := str(first, "cursor", "next", "next_cursor")
	d.say("   read 1 on instance #%d, from the start:", inst1)
	d.quote(str(first, "stdout", "text", "data", "output"))
	time.Sleep(600 * time.Millisecond)
	// Reads never drain, so a read may be repeated from the same cursor:
	// if the pool happened to hand back the same instance, ask again.
	var second map[string]any
	var inst2 uint64
	for try := 0; try < 4; try++ {
		second, inst2, err = d.call("alice", "read_process_logs", map[string]any{"id": id, "cursor": cursor})
		if err != nil {
			return fmt.Errorf("step 2 (second read): %w", err)
		}
		if inst2 != inst1 {
			break
		}
	}
	d.say("   read 2 on instance #%d, from cursor %s:", inst2, abbreviate(cursor, 24))
	d.quote(str(second, "stdout", "text", "data", "output"))
	if inst1 == inst2 {
		return fmt.Errorf("step 2: both reads landed on instance #%d; the pool did not rotate", inst1)
	}
	d.say("   → two reads on two instances (#%d, #%d), the second continuing where the cursor said:", inst1, inst2)
	d.say("     the process belongs to (shell, alice), not to any instance")
	return nil
}

// otherPrincipal is step 3: bob presents alice's ID and learns nothing.
func (d *demo) otherPrincipal(id string) error {
	d.say("3. bob presents the very same ID")
	_, _, err := d.call("bob", "read_process_logs", map[string]any{"id": id})
	switch ae := daemon.CallError(err); {
	case err == nil:
		return errors.New("step 3: bob could read alice's process")
	case ae.Code == api.CodeToolError && ae.ToolCode == api.CodeNoSuchProcess:
		d.say("   bob's read_process_logs fails: %s (%s)", ae.ToolCode, firstLine(ae.Message))
		d.say("   → exactly what an ID that never existed gets: nothing tells bob the process is there")
	default:
		return fmt.Errorf("step 3: want no-such-process, got: %w", err)
	}
	return nil
}

// stop is step 4: alice stops the tree; the registry shows the exit.
func (d *demo) stop(id string) error {
	d.say("4. alice stops it: SIGTERM to the whole process tree, SIGKILL after the grace period")
	stopped, inst4, err := d.call("alice", "kill_process", map[string]any{"id": id, "grace_ms": 2000})
	if err != nil {
		return fmt.Errorf("step 4 (stop): %w", err)
	}
	d.say("   kill_process ran on instance #%d: %s", inst4, exitText(stopped))
	info, err := d.rt.Registry.OperatorStatus(id)
	if err == nil {
		p := d.rt.ProcessView(info)
		d.say("   the registry now says: phase %s, %s, reason %s", p.Phase, api.ExitText(p.Exit), dash(p.Reason))
	}
	return nil
}

// quote prints process output indented, at most 6 lines.
func (d *demo) quote(text string) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		d.say("     | (no new output)")
		return
	}
	if len(lines) > 6 {
		n := len(lines) - 5
		lines = append(lines[:5], fmt.Sprintf("… %d more lines", n))
	}
	for _, l := range lines {
		d.say("     | %s", l)
	}
}

// str returns the first string field of m among keys.
func str(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := m[k].(string); ok {
			return s
		}
	}
	return ""
}

// exitText renders a tool's exit object: {"exit":{"code":0}} or
// {"exit":{"signal":15}}.
func exitText(m map[string]any) string {
	ex, _ := m["exit"].(map[string]any)
	if ex == nil {
		ex = m
	}
	if s, ok := ex["signal"].(float64); ok {
		return fmt.Sprintf("exited on signal %d", int(s))
	}
	if c, ok := ex["exit_code"].(float64); ok {
		return fmt.Sprintf("exited with code %d", int(c))
	}
	if c, ok := ex["code"].(float64); ok {
		return fmt.Sprintf("exited with code %d", int(c))
	}
	b, _ := json.Marshal(m)
	return string(b)
}
