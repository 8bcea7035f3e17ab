package main

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/capsules/sdk"
	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/terminal"
)

// Bounds. maxYieldMS stays well under the host's per-call deadline (30 s
// by default): a tool call that waited past it would be interrupted.
const (
	shell            = "/bin/sh"
	defaultYieldMS   = 10_000
	maxYieldMS       = 20_000
	defaultReadBytes = 64 << 10
	maxReadBytes     = 1 << 20
	// runOutputBytes bounds the output run_shell_command returns inline
	// per stream; the rest stays readable with read_process_logs.
	runOutputBytes = 256 << 10
	maxLabelBytes  = 128
)

const (
	runDesc   = `Runs a command with /bin/sh -c in the capsule's workspace. If it finishes within yield_ms (default 10000), returns its exit and output. Otherwise it keeps running in the background and the result has its id, "running": true, the output so far and a cursor: continue with read_process_logs, write_process_stdin or kill_process. timeout_ms bounds the command's whole lifetime.`
	runSchema = `{"type":"object","additionalProperties":false,"required":["command"],"properties":{
"command":{"type":"string","minLength":1,"description":"Shell command line, run as /bin/sh -c COMMAND."},
"cwd":{"type":"string","description":"Working directory relative to the capsule workspace."},
"timeout_ms":{"type":"integer","minimum":1,"description":"Kill the command after this long (whole run, also in the background). Default: the host's ceiling."},
"yield_ms":{"type":"integer","minimum":0,"maximum":20000,"description":"How long to wait before returning with the command still running in the background. Default 10000."}}}`

	spawnDesc   = `Starts a long-running command with /bin/sh -c in the background and returns its id at once. Use read_process_logs to follow its output.`
	spawnSchema = `{"type":"object","additionalProperties":false,"required":["command"],"properties":{
"command":{"type":"string","minLength":1},
"label":{"type":"string","maxLength":128,"description":"For list_processes filtering. Default: derived from the command."},
"keep_stdin_open":{"type":"boolean","description":"Keep stdin open for write_process_stdin. Default false (stdin closed)."},
"cwd":{"type":"string","description":"Working directory relative to the capsule workspace."},
"timeout_ms":{"type":"integer","minimum":1,"description":"Kill the command after this long. Default: the host's ceiling."}}}`

	readDesc   = `Reads a process's output from a cursor without consuming it (any number of readers). Returns text (never split inside a UTF-8 character), the next cursor, bytes lost because they were evicted before this read, whether it is running, and its exit.`
	readSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string"},
"cursor":{"type":"string","description":"The cursor a previous call returned (reading one stream, the logs API's \"next\" works too; both streams: \"OUT.ERR\"). Omit to read from the start."},
"max_bytes":{"type":"integer","minimum":1,"maximum":1048576,"description":"Per stream. Default 65536."},
"stream":{"enum":["stdout","stderr","both"],"description":"Default both."}}}`

	writeDesc   = `Writes text to the stdin of a process started with keep_stdin_open. Set close to send end-of-file afterwards.`
	writeSchema = `{"type":"object","additionalProperties":false,"required":["id","data"],"properties":{
"id":{"type":"string"},"data":{"type":"string","maxLength":1048576},"close":{"type":"boolean"}}}`

	listDesc   = `Lists this caller's processes (running and recently exited), optionally those whose label contains a string.`
	listSchema = `{"type":"object","additionalProperties":false,"properties":{"label":{"type":"string"}}}`

	killDesc   = `Stops a process: SIGTERM to its process group, then SIGKILL after grace_ms. Returns its exit. Its logs stay readable until the host forgets it.`
	killSchema = `{"type":"object","additionalProperties":false,"required":["id"],"properties":{
"id":{"type":"string"},"grace_ms":{"type":"integer","minimum":0,"description":"Default: the host's (5 s)."}}}`
)

// ---- inputs ----

type runIn struct {
	Command   string  `json:"command"`
	Cwd       *string `json:"cwd"`
	TimeoutMS *uint64 `json:"timeout_ms"`
	YieldMS   *uint64 `json:"yield_ms"`
}

func (in runIn) Validate() error {
	if strings.TrimSpace(in.Command) == "" {
		return errors.New(`"command" is required and must not be blank`)
	}
	if in.YieldMS != nil && *in.YieldMS > maxYieldMS {
		return fmt.Errorf(`"yield_ms" is %d; at most %d (a tool call is bounded by the host)`, *in.YieldMS, maxYieldMS)
	}
	if in.TimeoutMS != nil && *in.TimeoutMS == 0 {
		return errors.New(`"timeout_ms" must be at least 1`)
	}
	return nil
}

type spawnIn struct {
	Command       string  `json:"command"`
	Label         *string `json:"label"`
	KeepStdinOpen bool    `json:"keep_stdin_open"`
	Cwd           *string `json:"cwd"`
	TimeoutMS     *uint64 `json:"timeout_ms"`
}

func (in spawnIn) Validate() error {
	if strings.TrimSpace(in.Command) == "" {
		return errors.New(`"command" is required and must not be blank`)
	}
	if in.TimeoutMS != nil && *in.TimeoutMS == 0 {
		return errors.New(`"timeout_ms" must be at least 1`)
	}
	return nil
}

type readIn struct {
	ID       string  `json:"id"`
	Cursor   string  `json:"cursor"`
	MaxBytes *uint32 `json:"max_bytes"`
	Stream   string  `json:"stream"`
}

func (in readIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	if in.MaxBytes != nil && (*in.MaxBytes == 0 || *in.MaxBytes > maxReadBytes) {
		return fmt.Errorf(`"max_bytes" must be between 1 and %d`, maxReadBytes)
	}
	switch in.Stream {
	case "", "both", "stdout", "stderr":
		return nil
	}
	return fmt.Errorf(`"stream" is %q; one of stdout, stderr, both`, in.Stream)
}

type writeIn struct {
	ID    string `json:"id"`
	Data  string `json:"data"`
	Close bool   `json:"close"`
}

func (in writeIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	return nil
}

type listIn struct {
	Label *string `json:"label"`
}

type killIn struct {
	ID      string  `json:"id"`
	GraceMS *uint64 `json:"grace_ms"`
}

func (in killIn) Validate() error {
	if in.ID == "" {
		return errors.New(`"id" is required`)
	}
	return nil
}

// ---- outputs ----

// exitOut is an exit for the agent: exactly one of code and signal.
type exitOut struct {
	ExitCode *int32 `json:"exit_code,omitempty"`
	Signal   *int32 `json:"signal,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

func exitOf(e *process.ExitInfo, r *process.ExitReason) *exitOut {
	if e == nil {
		return nil
	}
	o := &exitOut{ExitCode: e.ExitCode, Signal: e.Signal}
	if r != nil {
		o.Reason = r.String()
	}
	return o
}

// logsOut is output read from a cursor.
type logsOut struct {
	ID           string   `json:"id"`
	Stdout       *string  `json:"stdout,omitempty"`
	Stderr       *string  `json:"stderr,omitempty"`
	Cursor       string   `json:"cursor"`
	BytesDropped uint64   `json:"bytes_dropped"`
	EOF          bool     `json:"eof"`
	Running      bool     `json:"running"`
	Exit         *exitOut `json:"exit,omitempty"`
}

// ---- helpers ----

// fail names the tool and adds a hint to errors an agent can act on.
func fail(tool string, err error) error {
	switch {
	case errors.Is(err, process.ErrNoSuchProcess):
		return fmt.Errorf("%s: %w (unknown id, or released, reaped, or started by another caller)", tool, err)
	case errors.Is(err, process.ErrCapabilityDenied):
		return fmt.Errorf("%s: %w (the capsule's manifest must grant exec of %s)", tool, err, shell)
	case errors.Is(err, process.ErrQuota), errors.Is(err, process.ErrRegistryFull):
		return fmt.Errorf("%s: %w (stop or kill finished processes with kill_process)", tool, err)
	}
	return fmt.Errorf("%s: %w", tool, err)
}

// labelFor derives a list_processes label from a command: printable,
// at most 128 bytes.
func labelFor(cmd string) string {
	var b strings.Builder
	for _, r := range cmd {
		if !unicode.IsPrint(r) {
			r = ' '
		}
		if b.Len()+len(string(r)) > maxLabelBytes-3 {
			b.WriteString("...")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

func shellRequest(command string, cwd *string) process.SpawnRequest {
	return process.SpawnRequest{Cmd: shell, Args: []string{"-c", command}, Cwd: cwd}
}

// read reads the selected streams from c, at most limit bytes each, and
// advances c. EOF is true when every selected stream is at its end.
func read(id string, c *cursor, stdout, stderr bool, limit uint32) (out logsOut, err error) {
	out.ID = id
	out.EOF = true
	one := func(s process.LogStream, host *string) (*string, error) {
		text, err := readText(id, s, host, limit)
		if err != nil {
			return nil, err
		}
		out.BytesDropped += text.dropped
		out.EOF = out.EOF && text.eof
		return &text.s, nil
	}
	if stdout {
		if out.Stdout, err = one(process.Stdout, &c.Out); err != nil {
			return out, err
		}
	}
	if stderr {
		if out.Stderr, err = one(process.Stderr, &c.Err); err != nil {
			return out, err
		}
	}
	out.Cursor = c.String(stdout, stderr)
	return out, nil
}

// chunkText is one stream's read as text.
type chunkText struct {
	s       string
	dropped uint64
	eof     bool
}

// readText reads one stream from *host (empty: the start) and advances
// it. A read ending inside a UTF-8 character is cut before it: the
// cursor there comes from reading again exactly up to the cut, so the
// next read starts with the whole character.
func readText(id string, s process.LogStream, host *string, limit uint32) (chunkText, error) {
	var cur *string
	if *host != "" {
		cur = host
	}
	ch, err := process.ReadSince(id, s, cur, max(limit, utf8.UTFMax))
	if err != nil {
		return chunkText{}, err
	}
	text, rest := splitUTF8(ch.Data, ch.EOF)
	next := ch.Next
	if cut := len(ch.Data) - len(rest); len(rest) > 0 && ch.BytesDropped == 0 {
		next = *host // nothing whole yet: stay
		if cut > 0 {
			again, err := process.ReadSince(id, s, cur, uint32(cut))
			if err != nil {
				return chunkText{}, err
			}
			if len(again.Data) == cut && again.BytesDropped == 0 {
				next = again.Next
			} else { // evicted meanwhile: take the chunk whole
				text, next = toValid(ch.Data), ch.Next
			}
		}
	} else if len(rest) > 0 {
		text = toValid(ch.Data) // bytes were lost before it anyway
	}
	*host = next
	return chunkText{s: text, dropped: ch.BytesDropped, eof: ch.EOF}, nil
}

// ---- tools ----

func runShellCommand(in runIn) (any, error) {
	const tool = "run_shell_command"
	yield := uint64(defaultYieldMS)
	if in.YieldMS != nil {
		yield = *in.YieldMS
	}
	// Started as a persistent process from the beginning: if it outlives
	// yield_ms, returning is all "moving to the background" takes.
	id, err := terminal.SpawnPersistent(shellRequest(in.Command, in.Cwd), process.PersistOptions{
		Label:         process.Ptr(labelFor(in.Command)),
		MaxLifetimeMS: in.TimeoutMS,
	})
	if err != nil {
		return nil, fail(tool, err)
	}
	_, werr := process.Wait(id, yield)
	if werr != nil && !errors.Is(werr, process.ErrWaitTimeout) {
		return nil, fail(tool, werr)
	}
	if werr != nil { // still running: hand it to the background
		var c cursor
		lo, err := read(id, &c, true, true, runOutputBytes)
		if err != nil {
			return nil, fail(tool, err)
		}
		return map[string]any{
			"id": id, "running": true,
			"stdout": lo.Stdout, "stderr": lo.Stderr, "cursor": lo.Cursor, "bytes_dropped": lo.BytesDropped,
			"note": fmt.Sprintf("still running after %d ms; it continues in the background: use read_process_logs with this id and cursor, write_process_stdin, or kill_process", yield),
		}, nil
	}
	// Finished: collect the output (to runOutputBytes per stream).
	var c cursor
	lo, err := read(id, &c, true, true, runOutputBytes)
	if err != nil {
		return nil, fail(tool, err)
	}
	st, err := terminal.Status(id)
	if err != nil {
		return nil, fail(tool, err)
	}
	res := map[string]any{
		"running": false, "exit": exitOf(st.Exit, st.ExitReason),
		"stdout": lo.Stdout, "stderr": lo.Stderr, "bytes_dropped": lo.BytesDropped,
		"timed_out": st.ExitReason != nil && *st.ExitReason == process.ReasonLifetime,
	}
	if lo.EOF {
		// Everything was returned: forget the process at once rather than
		// keep it for the exit-retention period.
		if err := process.Release(id); err != nil {
			return nil, fail(tool, err)
		}
	} else {
		res["id"], res["cursor"], res["truncated"] = id, lo.Cursor, true
		res["note"] = "output exceeds what one call returns: continue with read_process_logs using this id and cursor"
	}
	return res, nil
}

func spawnBackground(in spawnIn) (any, error) {
	label := labelFor(in.Command)
	if in.Label != nil {
		label = *in.Label
	}
	id, err := terminal.SpawnPersistent(shellRequest(in.Command, in.Cwd), process.PersistOptions{
		Label:         &label,
		KeepStdinOpen: in.KeepStdinOpen,
		MaxLifetimeMS: in.TimeoutMS,
	})
	if err != nil {
		return nil, fail("spawn_background_process", err)
	}
	return map[string]any{"id": id, "label": label, "running": true}, nil
}

func readProcessLogs(in readIn) (any, error) {
	const tool = "read_process_logs"
	c, err := parseCursor(in.Cursor, in.Stream != "stderr", in.Stream != "stdout")
	if err != nil {
		return nil, fmt.Errorf("invalid input: %w", err)
	}
	max := uint32(defaultReadBytes)
	if in.MaxBytes != nil {
		max = *in.MaxBytes
	}
	// Status first: if it says exited, the read below sees the final log.
	st, err := terminal.Status(in.ID)
	if err != nil {
		return nil, fail(tool, err)
	}
	lo, err := read(in.ID, &c, in.Stream != "stderr", in.Stream != "stdout", max)
	if err != nil {
		return nil, fail(tool, err)
	}
	lo.Running = st.Phase != process.PhaseExited
	lo.Exit = exitOf(st.Exit, st.ExitReason)
	return lo, nil
}

func writeProcessStdin(in writeIn) (any, error) {
	const tool = "write_process_stdin"
	n, err := process.WriteStdin(in.ID, []byte(in.Data))
	if err != nil {
		return nil, fail(tool, err)
	}
	if in.Close {
		if err := process.CloseStdin(in.ID); err != nil {
			return nil, fail(tool, err)
		}
	}
	return map[string]any{"written": n, "stdin_open": !in.Close}, nil
}

// procOut is one list_processes entry.
type procOut struct {
	ID        string   `json:"id"`
	Label     string   `json:"label"`
	Command   string   `json:"command"`
	Running   bool     `json:"running"`
	Exit      *exitOut `json:"exit,omitempty"`
	AgeMS     uint64   `json:"age_ms"`
	IdleMS    uint64   `json:"idle_ms"`
	StdinOpen bool     `json:"stdin_open"`
	Buffered  uint64   `json:"buffered_bytes"`
	Dropped   uint64   `json:"bytes_dropped"`
}

func listProcesses(in listIn) (any, error) {
	infos, err := terminal.ListProcesses(in.Label)
	if err != nil {
		return nil, fail("list_processes", err)
	}
	out := make([]procOut, len(infos))
	exits := make([]exitOut, len(infos)) // one allocation for every exit
	for i, p := range infos {
		out[i] = procOut{ID: p.ID, Label: p.Label, Command: p.Command, Running: p.Phase != process.PhaseExited,
			AgeMS: p.AgeMS, IdleMS: p.IdleMS, StdinOpen: p.StdinOpen, Buffered: p.BufferedBytes, Dropped: p.BytesDropped}
		if e := exitOf(p.Exit, p.ExitReason); e != nil {
			exits[i] = *e
			out[i].Exit = &exits[i]
		}
	}
	return sdk.ValidJSON(appendList(make([]byte, 0, 256*len(out)+16), out)), nil // listjson.go
}

func killProcess(in killIn) (any, error) {
	const tool = "kill_process"
	e, err := process.Stop(in.ID, in.GraceMS)
	if err != nil {
		return nil, fail(tool, err)
	}
	var reason *process.ExitReason
	if st, err := terminal.Status(in.ID); err == nil {
		reason = st.ExitReason
	}
	return map[string]any{"id": in.ID, "running": false, "exit": exitOf(&e, reason)}, nil
}
