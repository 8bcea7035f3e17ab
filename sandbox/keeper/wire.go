package keeper

import (
	"encoding/json"
	"fmt"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/capsule-host/capsule-host/sandbox"
)

// ProtocolVersion is the one version this keeper speaks. A change that an
// older peer would misread gets a new number; added optional fields do not.
const ProtocolVersion = 1

// Operation names (the "op" of a request).
const (
	opHello      = "hello"
	opStart      = "start"
	opList       = "list"
	opInspect    = "inspect"
	opRead       = "read"
	opDrain      = "drain"
	opAck        = "ack"
	opLogState   = "log_state"
	opWatch      = "watch"
	opWatchAll   = "watch_all"
	opWriteStdin = "write_stdin"
	opCloseStdin = "close_stdin"
	opSignal     = "signal"
	opTerminate  = "terminate"
	opWait       = "wait"
	opStats      = "stats"
	opCleanup    = "cleanup"
	opCancel     = "cancel"
	opShutdown   = "shutdown"
)

// request is every client frame.
type request struct {
	ID   uint64          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// response is every keeper frame: exactly one of Result and Error.
type response struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

type helloArgs struct {
	ProtocolVersion int    `json:"protocol_version"`
	Client          string `json:"client"`
}

type helloResult struct {
	ProtocolVersion int    `json:"protocol_version"`
	KeeperPID       int    `json:"keeper_pid"`
	Backend         string `json:"backend"`
}

type refArgs struct {
	Ref string `json:"ref"`
}

type startArgs struct {
	Spec wireSpec `json:"spec"`
}

type startResult struct {
	Ref string `json:"ref"`
	PID int    `json:"pid"`
}

type procInfo struct {
	Ref   string    `json:"ref"`
	PID   int       `json:"pid"`
	Phase string    `json:"phase"`
	Label string    `json:"label,omitempty"`
	Exit  *wireExit `json:"exit,omitempty"`
}

type listResult struct {
	Procs []procInfo `json:"procs"`
}

type logArgs struct {
	Ref    string `json:"ref"`
	Stream string `json:"stream"`
	Offset int64  `json:"offset,omitempty"`
	Max    int    `json:"max,omitempty"`
}

// LogState is what OutputLog's accessors report. Every log answer
// carries it, so a RemoteLog learns the state without extra round trips.
type LogState struct {
	End      int64 `json:"end"`
	Closed   bool  `json:"closed"`
	Dropped  int64 `json:"dropped"`
	Retained int64 `json:"retained"`
}

type chunkResult struct {
	Data    []byte   `json:"data"`
	Next    int64    `json:"next"`
	Dropped int64    `json:"dropped"`
	EOF     bool     `json:"eof"`
	State   LogState `json:"state"`
	// Marks: capture times (absent from a keeper older than them).
	Marks []sandbox.Mark `json:"marks,omitempty"`
}

// WatchRequest says what a watch waits for: a stream's end passing the
// given offset or the stream closing (a negative offset does not watch
// that stream), or, with Exit, the process settling. The answer comes at
// once if that already happened.
type WatchRequest struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
	Exit   bool  `json:"exit"`
}

type watchArgs struct {
	Ref string `json:"ref"`
	WatchRequest
}

// WatchResult is the state a watch saw when it fired.
type WatchResult struct {
	Stdout LogState `json:"stdout"`
	Stderr LogState `json:"stderr"`
	Exited bool     `json:"exited"`
}

type watchAllArgs struct {
	Since uint64 `json:"since"`
}

// watchAllResult is the state of every process that changed after the
// generation asked for; with Full, of every process the keeper holds.
type watchAllResult struct {
	Gen   uint64       `json:"gen"`
	Full  bool         `json:"full"`
	Procs []procChange `json:"procs"`
}

// procChange is one process's state in a watch_all answer; Gone: removed
// (cleaned up), the other fields are then empty. A stream's End is -1
// when the keeper has not opened a recovered process's log (it is closed;
// a read tells its real state).
type procChange struct {
	Ref    string   `json:"ref"`
	Stdout LogState `json:"stdout"`
	Stderr LogState `json:"stderr"`
	Exited bool     `json:"exited"`
	// Exit is the recorded exit once Exited, so that a client settles its
	// handle without a wait round trip; absent from an older keeper's
	// answers (the client then waits as before).
	Exit *wireExit `json:"exit,omitempty"`
	Gone bool      `json:"gone,omitempty"`
}

type stdinArgs struct {
	Ref  string `json:"ref"`
	Data []byte `json:"data"`
}

type countResult struct {
	N int `json:"n"`
}

type signalArgs struct {
	Ref    string `json:"ref"`
	Signal int    `json:"signal"`
}

type terminateArgs struct {
	Ref  string `json:"ref"`
	Mode string `json:"mode"` // "graceful" | "force"
}

type exitResult struct {
	Exit wireExit `json:"exit"`
}

type statsResult struct {
	CPUTimeNS  *int64 `json:"cpu_time_ns,omitempty"`
	MemoryPeak *int64 `json:"memory_peak,omitempty"`
}

type cancelArgs struct {
	Target uint64 `json:"target"`
}

type shutdownArgs struct {
	StopAll bool `json:"stop_all"`
}

// Reason says how an exit record came about.
type Reason string

const (
	// ReasonExited: the keeper saw the process settle; the record is real.
	ReasonExited Reason = "exited"
	// ReasonKeeperLost: the keeper that owned the process died; a later
	// keeper killed what was left of it (Signal SIGKILL) or found it gone
	// (Code -1: its real status went to whoever reaped it).
	ReasonKeeperLost Reason = "keeper-lost"
)

// Exit is the seam's Exit plus how the keeper knows it.
type Exit struct {
	sandbox.Exit
	Reason Reason
}

type wireExit struct {
	Code      int       `json:"code"`
	Signal    int       `json:"signal"`
	KilledFor string    `json:"killed_for,omitempty"`
	At        time.Time `json:"at"`
	Reason    Reason    `json:"reason"`
}

func exitToWire(x Exit) wireExit {
	return wireExit{Code: x.Code, Signal: int(x.Signal), KilledFor: string(x.KilledFor), At: x.At, Reason: x.Reason}
}

func (w wireExit) exit() Exit {
	return Exit{Exit: sandbox.Exit{Code: w.Code, Signal: syscall.Signal(w.Signal), KilledFor: sandbox.LimitKind(w.KilledFor), At: w.At}, Reason: w.Reason}
}

// Stream names one output stream.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

func (s Stream) index() (int, error) {
	switch s {
	case Stdout:
		return 0, nil
	case Stderr:
		return 1, nil
	}
	return 0, fmt.Errorf("stream %q is not stdout or stderr: %w", string(s), ErrProtocol)
}

// checkUTF8 refuses strings JSON cannot carry: encoding/json would
// silently replace invalid bytes with U+FFFD, changing an argv or an env
// value. Guest strings come from WIT, which requires UTF-8, so a valid
// request never hits this.
func checkUTF8(field string, ss ...string) error {
	for i, s := range ss {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%s[%d]: not UTF-8, which the keeper protocol (JSON) cannot carry: %w", field, i, sandbox.ErrInvalidSpec)
		}
	}
	return nil
}
