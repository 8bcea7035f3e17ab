package process

import (
	. "github.com/capsule-host/capsule-host/host/internal/cabi"
)

// The WIT types of capsule:process@1.0.0, @1.1.0 and @1.2.0, as
// Canonical ABI descriptors. Field and case order is the WIT order: it IS
// the ABI. Types that did not change between the versions are shared.

// processInfo11 are the fields of 1.1.0's process-info.
var processInfo11 = []Field{
	F("id", tProcessID),
	F("label", String),
	F("command", String),
	F("os-pid", Option(U32)),
	F("phase", tPhase),
	F("exit", Option(tExitInfo)),
	F("exit-reason", Option(tExitReason)),
	F("age-ms", U64),
	F("idle-ms", U64),
	F("buffered-bytes", U64),
	F("bytes-dropped", U64),
	F("stdin-open", Bool),
	F("cpu-ms", Option(U64)),
	F("mem-bytes-peak", Option(U64)),
}

// Module names served (the legacy core-module mangling: "ns:pkg/iface@ver").
const (
	Module10 = "capsule:process/host@1.0.0"
	Module11 = "capsule:process/host@1.1.0"
	Module12 = "capsule:process/host@1.2.0"
)

// Served returns the import module names this package serves, for import
// validation and for the error that lists the versions a host serves.
func Served() []string { return []string{Module10, Module11, Module12} }

var (
	tEnvVar = Record("env-var", F("key", String), F("value", String))

	tSpawnRequest = Record("spawn-request",
		F("cmd", String),
		F("args", List(String)),
		F("stdin", Option(List(U8))),
		F("env", List(tEnvVar)),
		F("cwd", Option(String)),
		F("timeout-ms", Option(U64)),
	)

	tExitInfo = Record("exit-info", F("exit-code", Option(S32)), F("signal", Option(S32)))

	tProcessResult = Record("process-result",
		F("stdout", List(U8)),
		F("stderr", List(U8)),
		F("exit", tExitInfo),
		F("truncated", Bool),
	)

	tReadLogsResult = Record("read-logs-result",
		F("stdout", List(U8)),
		F("stderr", List(U8)),
		F("running", Bool),
		F("exit", Option(tExitInfo)),
		F("bytes-dropped", U64),
	)

	tOwnHandle    = Own("process-handle")
	tBorrowHandle = Borrow("process-handle")

	// 1.0.0 only.
	tErrorCode10 = VariantOf("error-code",
		C("capability-denied", String),
		C("invalid-input", String),
		C("boundary-escape", String),
		C("quota", nil),
		C("too-large", String),
		C("closed", nil),
		C("cancelled", nil),
		C("wait-timeout", nil),
		C("unavailable", String),
		C("internal", String),
	)
	tSignal10 = Enum("process-signal", "term", "hup", "int", "usr1", "usr2")

	// 1.1.0.
	tErrorCode11 = VariantOf("error-code",
		C("capability-denied", String),
		C("invalid-input", String),
		C("boundary-escape", String),
		C("quota", nil),
		C("too-large", String),
		C("closed", nil),
		C("cancelled", nil),
		C("wait-timeout", nil),
		C("unavailable", String),
		C("internal", String),
		C("no-such-process", nil),
		C("registry-full", nil),
		C("persist-unsupported", nil),
		C("torn-write", U64),
	)
	tSignal11 = Enum("process-signal", "term", "hup", "int", "usr1", "usr2", "stop", "cont", "kill")

	tProcessID = String // type process-id = string

	tOverflow = Enum("overflow-policy", "drop-oldest", "backpressure")

	tResourceLimits = Record("resource-limits",
		F("max-memory-bytes", Option(U64)),
		F("max-cpu-ms", Option(U64)),
		F("max-pids", Option(U32)),
		F("max-open-files", Option(U32)),
	)

	tPersistOptions = Record("persist-options",
		F("label", Option(String)),
		F("keep-stdin-open", Bool),
		F("overflow", tOverflow),
		F("log-ring-bytes", Option(U32)),
		F("max-lifetime-ms", Option(U64)),
		F("idle-timeout-ms", Option(U64)),
		F("exit-retention-ms", Option(U64)),
		F("limits", tResourceLimits),
	)

	tPhase      = Enum("process-phase", "starting", "running", "exited")
	tLogStream  = Enum("log-stream", "stdout", "stderr")
	tExitReason = Enum("exit-reason", "self-exit", "stopped", "killed", "lifetime", "idle", "evicted", "removed")

	tLogChunk = Record("log-chunk",
		F("data", List(U8)),
		F("next", String),
		F("bytes-dropped", U64),
		F("eof", Bool),
	)

	tProcessInfo = Record("process-info", processInfo11...)

	tExitEvent = Record("exit-event", F("exit", tExitInfo), F("reason", tExitReason))

	tEventKind = VariantOf("event-kind",
		C("exited", tExitEvent),
		C("log-ready", tLogStream),
		C("stdin-drained", nil),
	)

	tProcessEvent = Record("process-event", F("seq", U64), F("id", tProcessID), F("kind", tEventKind))

	tEventBatch = Record("event-batch", F("events", List(tProcessEvent)), F("next", U64), F("missed", U64))

	// 1.2.0: the terminal tier. error-code and process-signal are 1.1.0's.
	tTerminalSpec = Record("terminal-spec", F("rows", U16), F("cols", U16), F("term", Option(String)))

	tPersistOptions12 = Record("persist-options",
		F("label", Option(String)),
		F("keep-stdin-open", Bool),
		F("overflow", tOverflow),
		F("log-ring-bytes", Option(U32)),
		F("max-lifetime-ms", Option(U64)),
		F("idle-timeout-ms", Option(U64)),
		F("exit-retention-ms", Option(U64)),
		F("limits", tResourceLimits),
		F("terminal", Option(tTerminalSpec)),
	)

	tKey = VariantOf("key", C("named", String), C("text", String))

	tScreenSnapshot = Record("screen-snapshot",
		F("rows", U16),
		F("cols", U16),
		F("lines", List(String)),
		F("cursor-row", U16),
		F("cursor-col", U16),
		F("cursor-visible", Bool),
		F("alt-screen", Bool),
		F("title", String),
		F("app-cursor-keys", Bool),
		F("app-keypad", Bool),
		F("bracketed-paste", Bool),
		F("scrollback", List(String)),
		F("skipped-bytes", U64),
		F("behind-bytes", U64),
	)

	tOutputMatch = Record("output-match", F("which-stream", tLogStream), F("cursor", Option(String)), F("regex", String))

	tWaitCondition = VariantOf("wait-condition",
		C("output-matches", tOutputMatch),
		C("quiet-ms", U64),
		C("input-wait", nil),
		C("exited", nil),
	)

	tWaitFired = Enum("wait-fired", "output-matched", "quiet", "input-wait", "exited")

	tWaitForResult = Record("wait-for-result", F("fired", tWaitFired), F("cursor", String))

	tTerminalInfo = Record("terminal-info", F("rows", U16), F("cols", U16), F("term", String))

	// 1.2.0's process-info is 1.1.0's with four fields appended.
	tProcessInfo12 = Record("process-info", append(processInfo11[:len(processInfo11):len(processInfo11)],
		F("terminal", Option(tTerminalInfo)),
		F("waiting-for-input", Option(Bool)),
		F("reap-in-ms", Option(U64)),
		F("reap-rule", Option(tExitReason)),
	)...)
)
