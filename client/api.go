// Package client is the Go client of the capsule-host daemon and the wire
// format of its HTTP/JSON API, over a unix socket (NewUnix) or a loopback
// TCP listener with a bearer token (NewTCP). The daemon, the capsule-host
// CLI and this client share these types, so they cannot drift: the CLI is
// built on this package, which makes it the tested path. The API is
// described for other languages by the OpenAPI document the daemon serves
// at GET /v1/openapi.json.
//
//	c := client.NewUnix("/run/user/1000/capsule-host/capsule-host.sock")
//	res, err := c.Call(ctx, client.CallRequest{Capsule: "shell", Tool: "run_command", Input: json.RawMessage(`{"command":"echo hi"}`)})
//	var e *client.Error
//	if errors.As(err, &e) && e.Code == client.CodeNoSuchProcess { ... }
//
// An error answer of the daemon is an *Error carrying one of the stable
// Code* values; a daemon that cannot be reached is ErrUnreachable.
//
// Endpoints (all under /v1):
//
//	GET  /v1/health                       Health
//	GET  /v1/openapi.json                 the OpenAPI 3.1 document of this API
//	GET  /v1/capsules                     CapsuleList
//	GET  /v1/capsules/{name}              Capsule
//	POST /v1/reload                       ReloadRequest → ReloadResponse (socket only)
//	POST /v1/call                         CallRequest → CallResponse
//	GET  /v1/processes?capsule=&principal= ProcessList
//	GET  /v1/processes/{id}               Process
//	GET  /v1/processes/{id}/logs?stream=stdout|stderr&cursor=&max=&follow=1
//	                                      LogChunk (follow: one JSON LogChunk per line)
//	POST /v1/processes/{id}/stop          StopRequest → StopResponse
//
// Every error is an ErrorResponse with a stable Code.
package client

import (
	"encoding/json"
	"fmt"
)

// Health is the answer of GET /v1/health. While the daemon compiles its
// capsules at start, Status is "loading" with Loading set, and every
// other route answers 503 with CodeLoading; Client.WaitReady polls until
// Ready.
type Health struct {
	Status string `json:"status"` // "loading", "ok" or "shutting-down"
	// Ready: the start finished (capsules loaded, processes re-adopted);
	// calls are served.
	Ready bool `json:"ready"`
	// Loading is the start's progress, while Status is "loading".
	Loading *LoadProgress `json:"loading,omitempty"`
	// CapsuleStates is each configured capsule's state, sorted by name.
	CapsuleStates []CapsuleState `json:"capsule_states,omitempty"`
	Version       string         `json:"version"`
	Engine        string         `json:"engine,omitempty"`
	Contracts     []string       `json:"contracts"`
	Capsules      int            `json:"capsules"`
	// CapsulesFailed counts capsule directories that failed to load or
	// reload (CapsuleList.Failed).
	CapsulesFailed int   `json:"capsules_failed,omitempty"`
	UptimeMS       int64 `json:"uptime_ms"`
	// Principal is the caller's principal on TCP, "" on the socket
	// (operator).
	Principal string `json:"principal,omitempty"`
	// Cluster is "" outside cluster mode, else "ok (node N)" or
	// "degraded: ..." (etcd unreachable or the lease lost: new spawns are
	// refused, held processes keep serving).
	Cluster string `json:"cluster,omitempty"`
	// Runtime is the daemon process's own figures, for the operator only
	// (absent over TCP): what a leak grows.
	Runtime *RuntimeFigures `json:"runtime,omitempty"`
}

// RuntimeFigures are the daemon process's goroutines, open descriptors
// and Go heap. A goroutine leak is visible only from inside the process;
// the descriptors are in /proc too, but not to an operator of another
// uid. The daemon holds no goroutine and no descriptor per keeper-held
// process (their keeper's feed calls back), so with no call in flight
// Goroutines and FDs stay level across calls and restarts (the
// durability hammer checks both).
type RuntimeFigures struct {
	Goroutines int `json:"goroutines"`
	// FDs is -1 when /proc/self/fd cannot be read.
	FDs int `json:"fds"`
	// HeapLiveBytes is the heap the last garbage collection found live,
	// and GCCycles how many it has run: the resident size moves with
	// the collector's cycle by up to the live heap, so a per-process
	// memory figure is read at the same point of it (BenchmarkScale).
	HeapLiveBytes uint64 `json:"heap_live_bytes"`
	GCCycles      uint64 `json:"gc_cycles"`
}

// LoadProgress counts the capsules the start has finished (loaded or
// failed) out of those configured.
type LoadProgress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// CapsuleState is one capsule (or unreadable capsule directory) in health.
type CapsuleState struct {
	Name string `json:"name,omitempty"`
	Dir  string `json:"dir,omitempty"`
	// State is pending (start only), compiling, ready or failed.
	State   string `json:"state"`
	Version string `json:"version,omitempty"`
	// Error is the last load's error (failed); Serving the version that
	// keeps serving in its place.
	Error   string `json:"error,omitempty"`
	Serving string `json:"serving,omitempty"`
}

// Tool is one tool of a capsule.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Capsule is one loaded capsule and its tools.
type Capsule struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Tools   []Tool `json:"tools"`
}

// CapsuleList is the answer of GET /v1/capsules. Failed lists the
// capsule directories whose last load or reload failed; the daemon serves
// the others.
type CapsuleList struct {
	Capsules []Capsule        `json:"capsules"`
	Failed   []CapsuleFailure `json:"failed,omitempty"`
}

// CapsuleFailure is one capsule directory that failed to load.
type CapsuleFailure struct {
	// Name is the capsule's name, "" when its manifest could not be read
	// and no earlier version came from this directory.
	Name string `json:"name,omitempty"`
	Dir  string `json:"dir"`
	// Kind is the error class: missing, manifest, checksum, import,
	// export, policy, describe, instance, engine, component (a component
	// construct or binary refused), closed, internal.
	Kind  string `json:"kind"`
	Error string `json:"error"`
	// At is when the load was tried (RFC 3339).
	At string `json:"at"`
	// Serving is the version that keeps serving in its place ("": none,
	// the capsule is not served).
	Serving string `json:"serving,omitempty"`
}

// ReloadRequest asks the daemon to re-read its capsule directories and
// the bundled set: every capsule, or only Capsule.
type ReloadRequest struct {
	Capsule string `json:"capsule,omitempty"`
}

// ReloadResponse says what a reload did, by capsule name. A replaced
// capsule kept its processes; a removed one (no longer configured) had
// its processes stopped, ProcessesStopped in all. A failed one keeps its
// previous version serving (Failed[i].Serving).
type ReloadResponse struct {
	Added            []string         `json:"added"`
	Replaced         []string         `json:"replaced"`
	Unchanged        []string         `json:"unchanged"`
	Removed          []string         `json:"removed"`
	Failed           []CapsuleFailure `json:"failed"`
	ProcessesStopped int              `json:"processes_stopped"`
}

// CallRequest is a tool call. Input is the tool's JSON input (default
// {}). Principal is who the call acts for; on TCP it must be empty or the
// token's principal.
type CallRequest struct {
	Capsule   string          `json:"capsule"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input,omitempty"`
	Principal string          `json:"principal,omitempty"`
}

// CallResponse is a successful call. Output is the tool's output: JSON when
// the tool returned JSON, else a JSON string. Instance is the pooled
// instance that served the call.
type CallResponse struct {
	Output     json.RawMessage `json:"output"`
	Instance   uint64          `json:"instance"`
	DurationMS int64           `json:"duration_ms"`
}

// Exit is how a process ended, in the one shape of the HTTP API, the CLI's
// --json, MCP and the SDK (the contract's exit-info): exactly one of
// ExitCode (it exited) and Signal (a signal ended it), plus Reason, why
// it ended (self-exit, stopped, killed, lifetime, idle, evicted, removed)
// when known.
type Exit struct {
	ExitCode *int32 `json:"exit_code,omitempty"`
	Signal   *int32 `json:"signal,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// ExitText renders an exit for people: "exit 0", "signal 15", or "-"
// for none (still running, or unknown). The daemon's log and the CLI
// print the same words.
func ExitText(e *Exit) string {
	switch {
	case e == nil:
		return "-"
	case e.Signal != nil:
		return fmt.Sprintf("signal %d", *e.Signal)
	case e.ExitCode != nil:
		return fmt.Sprintf("exit %d", *e.ExitCode)
	}
	return "-"
}

// Process is the operator view of one persistent process.
type Process struct {
	ID string `json:"id"`
	// LogID is the short hash the daemon's log uses for this process
	// (attribute "proc"); logs never carry the ID itself.
	LogID string `json:"log_id"`
	// Node is the cluster node holding it ("" outside cluster mode).
	Node          string  `json:"node,omitempty"`
	Capsule       string  `json:"capsule"`
	Principal     string  `json:"principal"`
	Label         string  `json:"label,omitempty"`
	Command       string  `json:"command"`
	PID           *uint32 `json:"pid,omitempty"`
	Phase         string  `json:"phase"` // starting, running, exited
	Exit          *Exit   `json:"exit,omitempty"`
	Reason        string  `json:"reason,omitempty"` // self-exit, stopped, killed, lifetime, idle, evicted, removed
	AgeMS         int64   `json:"age_ms"`
	IdleMS        int64   `json:"idle_ms"`
	BufferedBytes uint64  `json:"buffered_bytes"`
	BytesDropped  uint64  `json:"bytes_dropped"`
	StdinOpen     bool    `json:"stdin_open"`
	CPUMS         *int64  `json:"cpu_ms,omitempty"`
	MemPeakBytes  *uint64 `json:"mem_peak_bytes,omitempty"`
	// Args is the argv after Command (a shell's "-c SCRIPT").
	Args []string `json:"args,omitempty"`
	// Terminal is set for a terminal process: its size now and TERM.
	Terminal *TerminalSize `json:"terminal,omitempty"`
	// WaitingForInput: blocked reading its input (absent: unknown).
	WaitingForInput *bool `json:"waiting_for_input,omitempty"`
	// ReapInMS and ReapRule say when the host will end a running process
	// and by which rule (idle or lifetime).
	ReapInMS *int64 `json:"reap_in_ms,omitempty"`
	ReapRule string `json:"reap_rule,omitempty"`
}

// TerminalSize is a terminal process's window and TERM.
type TerminalSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
	Term string `json:"term"`
}

// ProcessList is the answer of GET /v1/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
	// Unreachable names the cluster nodes whose processes are missing
	// from the list because they did not answer.
	Unreachable []string `json:"unreachable,omitempty"`
}

// LogChunk is a slice of one output stream. Data is base64 in JSON, so
// output stays byte-faithful. Next is the cursor for the following read.
type LogChunk struct {
	Data         []byte `json:"data"`
	Next         string `json:"next"`
	BytesDropped uint64 `json:"bytes_dropped"`
	EOF          bool   `json:"eof"`
	// Times says when Data's bytes were captured: Data[At:] up to the next
	// entry was written at UnixNano. Bytes before the first entry have no
	// recorded time (a daemon older than times, or a keeper restarted).
	Times []LogTime `json:"times,omitempty"`
}

// LogTime is one capture time of a LogChunk.
type LogTime struct {
	At       int   `json:"at"`
	UnixNano int64 `json:"unix_nano"`
}

// StopRequest asks for a graceful stop: SIGTERM, then SIGKILL after
// GraceMS (nil: the host default; capped by the host).
type StopRequest struct {
	GraceMS *int64 `json:"grace_ms,omitempty"`
}

// StopResponse carries the exit of the stopped process.
type StopResponse struct {
	Exit Exit `json:"exit"`
}

// Error codes. They are stable: clients switch on them.
const (
	CodeInvalidRequest = "invalid-request"
	CodeUnauthorized   = "unauthorized"
	CodeForbidden      = "forbidden"
	CodeNoSuchCapsule  = "no-such-capsule"
	CodeNoSuchTool     = "no-such-tool"
	CodeNoSuchProcess  = "no-such-process"
	CodeToolError      = "tool-error"
	CodeTimeout        = "timeout"
	CodeTrap           = "trap"
	CodeCancelled      = "cancelled"
	CodeShuttingDown   = "shutting-down"
	// CodeLoading (503): the daemon is still compiling its capsules at
	// start; the message says "loading N of M capsules".
	CodeLoading  = "loading"
	CodeInternal = "internal"
	// CodeConfigError (422): a reload could not re-read the host config;
	// nothing was changed.
	CodeConfigError = "config-error"
	// CodeTooManyConnections (429): the client holds as many connections
	// to the daemon as it may; this one is closed after the answer.
	CodeTooManyConnections = "too-many-connections"
)

// ErrorBody is one error. ToolCode is set on a tool-error whose tool
// returned a typed code (the guest contract's convention: an err string
// that is the JSON object {"code": CODE, "message": TEXT}, written by the
// SDK's sdk.Error and for every process error), e.g. "no-such-process":
// a client branches on it to tell a missing process from a failure.
type ErrorBody struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	ToolCode string `json:"tool_code,omitempty"`
}

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}
