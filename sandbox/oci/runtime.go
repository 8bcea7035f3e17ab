package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runtime is an OCI runtime's command line: the binary (runc or runsc)
// and the global flags of one backend root (state root, log, rootless,
// runsc's network). Every runtime command of the package, the host's and
// the monitor's, is made here.
type runtime struct {
	path   string
	global []string
}

func (r runtime) name() string { return filepath.Base(r.path) }

// command is `runtime <global flags> op args...`.
func (r runtime) command(ctx context.Context, op string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, r.path, append(append(append([]string(nil), r.global...), op), args...)...)
}

// exec runs a runtime command and returns its stdout. A failure is a
// *runtimeError, classified (see classifyRuntime).
func (r runtime) exec(ctx context.Context, op string, args ...string) ([]byte, error) {
	cmd := r.command(ctx, op, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, newRuntimeError(r.name(), op, args, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// runtimeState is the runtime's `state` answer.
type runtimeState struct {
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

// The statuses of `runtime state` (the OCI runtime spec's, plus runc's
// "paused"), by what they mean for the container's process.
func statusStarting(s string) bool { return s == "creating" || s == "created" }
func statusAlive(s string) bool    { return s == "running" || s == "paused" || s == "pausing" }

func (r runtime) state(ctx context.Context, cid string) (runtimeState, error) {
	out, err := r.exec(ctx, "state", cid)
	if err != nil {
		return runtimeState{}, err
	}
	var rs runtimeState
	if err := json.Unmarshal(out, &rs); err != nil {
		return runtimeState{}, fmt.Errorf("runtime state: %w", err)
	}
	return rs, nil
}

// kill signals the container's init (all: every process of it). A kill
// that failed because the container already stopped, or is gone, gives
// errNotRunning: decided from the runtime's state, not its message.
func (r runtime) kill(ctx context.Context, cid string, sig syscall.Signal, all bool) error {
	args := []string{cid, strconv.Itoa(int(sig))}
	if all {
		args = append([]string{"--all"}, args...)
	}
	_, err := r.exec(ctx, "kill", args...)
	if err == nil {
		return nil
	}
	if !errors.Is(err, errNoContainer) {
		rs, serr := r.state(ctx, cid)
		if !errors.Is(serr, errNoContainer) && (serr != nil || rs.Status != "stopped") {
			return err
		}
	}
	return fmt.Errorf("%w: %w", errNotRunning, err)
}

// delete removes the runtime's container (force: killing it first). A
// container that is already gone is not an error; one that still has a
// live process gives errStillRunning, decided from the runtime's state.
func (r runtime) delete(ctx context.Context, cid string, force bool) error {
	args := []string{cid}
	if force {
		args = append([]string{"--force"}, args...)
	}
	_, err := r.exec(ctx, "delete", args...)
	if err == nil || errors.Is(err, errNoContainer) {
		return nil
	}
	if rs, serr := r.state(ctx, cid); serr == nil && statusAlive(rs.Status) {
		return fmt.Errorf("%w: %w", errStillRunning, err)
	}
	return err
}

// The runtime's failures the package decides on.
var (
	// errNoContainer: the runtime has no container of that id (never
	// created, or deleted).
	errNoContainer = errors.New("container does not exist")
	// errNotRunning: a signal found the container stopped or gone.
	errNotRunning = errors.New("container not running")
	// errStillRunning: a delete found the container's process alive.
	errStillRunning = errors.New("container still running")
)

// runtimeError is a runtime command that failed. It is JSON so that the
// monitor can hand the host its `run` failure as it happened.
type runtimeError struct {
	Runtime string   `json:"runtime"` // the binary's base name
	Op      string   `json:"op"`      // the subcommand: run, state, kill, delete
	Args    []string `json:"args,omitempty"`
	// ExitCode is the command's exit status; -1 if it did not exit (it
	// could not be started, or a signal ended it).
	ExitCode int `json:"exit_code"`
	// Stderr is what the runtime said: its stderr, or for run (whose
	// stderr is the container's) the error lines of its log.
	Stderr string `json:"stderr,omitempty"`

	err   error // the exec error, in the process that ran the command
	class error // classifyRuntime's verdict, or nil
}

func newRuntimeError(runtime, op string, args []string, err error, stderr string) *runtimeError {
	e := &runtimeError{Runtime: runtime, Op: op, Args: args, ExitCode: -1, Stderr: stderr, err: err}
	var xe *exec.ExitError
	if errors.As(err, &xe) && xe.Exited() {
		e.ExitCode = xe.ExitCode()
	}
	return e.classified()
}

// ran reports whether the command ran (and failed), rather than not
// starting at all.
func (e *runtimeError) ran() bool {
	var xe *exec.ExitError
	return errors.As(e.err, &xe)
}

// classified sets the class (again, after decoding).
func (e *runtimeError) classified() *runtimeError {
	e.class = classifyRuntime(e)
	return e
}

func (e *runtimeError) Error() string {
	s := e.Runtime + " " + e.Op + ": "
	switch {
	case e.err != nil:
		s += fmt.Sprint(e.err)
	case e.ExitCode >= 0:
		s += "exit status " + strconv.Itoa(e.ExitCode)
	default:
		s += "killed by a signal"
	}
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	return s
}

// Unwrap gives the exec error (exec.ExitError, or why it did not start)
// and the class, so errors.Is(err, errNoContainer) and errors.Is(err,
// fs.ErrNotExist) work.
func (e *runtimeError) Unwrap() []error {
	var out []error
	for _, x := range []error{e.err, e.class} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// classifyRuntime is the one place that reads a runtime's error text:
// runc and runsc exit 1 for every failure and say which only in words,
// so what the package decides on (the OS error class a failed start
// promises in SpawnError.Cause, a container that is gone) can only be
// read there. Everything else is decided from structured answers (`state`
// JSON, the exit record, pid files). The classes:
//
//   - run: "no such file or directory" or "executable file not found"
//     (the process's executable is missing; without capsule-oci-init the
//     runtime's own exec reports it) is fs.ErrNotExist; "permission
//     denied" is fs.ErrPermission.
//   - state, kill, delete: "does not exist" / "not exist" (runc:
//     "container does not exist"; runsc likewise) is errNoContainer.
//
// Anything else is unclassified (nil).
func classifyRuntime(e *runtimeError) error {
	msg := e.Stderr
	if e.Op == "run" {
		switch {
		case strings.Contains(msg, "no such file or directory"), strings.Contains(msg, "executable file not found"):
			return fs.ErrNotExist
		case strings.Contains(msg, "permission denied"):
			return fs.ErrPermission
		}
		return nil
	}
	if strings.Contains(msg, "not exist") {
		return errNoContainer
	}
	return nil
}

// runtimeLogTail is the error lines of the runtime's log (runtime.log in
// the state directory, JSON lines), the last three: `run` reports its own
// failures there, its stderr being the container's.
func runtimeLogTail(stateDir string) string {
	b, err := os.ReadFile(filepath.Join(stateDir, logName))
	if err != nil || len(b) == 0 {
		return ""
	}
	var msgs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l struct{ Level, Msg string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg != "" {
			if l.Level == "error" || l.Level == "fatal" || l.Level == "warning" {
				msgs = append(msgs, l.Msg)
			}
		} else if t := strings.TrimSpace(sc.Text()); t != "" {
			msgs = append(msgs, t)
		}
	}
	if len(msgs) > 3 {
		msgs = msgs[len(msgs)-3:]
	}
	return strings.Join(msgs, "; ")
}
