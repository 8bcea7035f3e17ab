// Package keeper keeps persistent processes alive outside the daemon, so
// that a crash, restart or upgrade of `capsule-host serve` does not end
// them.
//
// # Shape
//
// One keeper per state directory, like the tmux server: a re-exec of the
// same binary (role "capsule-host-keeper", see Start) that embeds an
// in-process sandbox.Backend (the local backend; bwrap later through the
// same code) and serves it over <dir>/keeper.sock. One process for all
// persistent processes, not a monitor per process (conmon, containerd
// shim): a Go process costs megabytes, a process entry in the keeper a
// few kilobytes (BenchmarkKeeperMemory).
//
// The keeper runs in its own session with stdio on /dev/null and
// <dir>/keeper.log and no parent-death signal. The embedded local backend
// makes it the child subreaper (local.New), so descendants that
// double-fork are re-parented to the keeper and reaped by it.
//
// # Directory
//
//	<dir>/             0700, ours; refused if group/world-writable or another's
//	<dir>/keeper.lock  flock(2) held for the keeper's life; holds its PID
//	<dir>/keeper.sock  0600 unix socket (stale after a SIGKILL: ErrKeeperGone)
//	<dir>/keeper.log   the keeper's stderr
//	<dir>/procs/<id>/  one per process: proc.json (PID and start time, the
//	                   embedded backend's ID of it, written at start), exit.json (written atomically when
//	                   it settles, made durable by a syncfs shared with the
//	                   exits settling meanwhile, kept until cleanup), and the
//	                   spill files of its output (proc-*/std{out,err}.log)
//
// # Frames
//
// Every frame in both directions is a 4-byte big-endian length followed
// by that many bytes of JSON (1 ≤ length ≤ MaxFrame, 8 MiB). JSON because
// the traffic is control traffic plus bounded output chunks, a frame can
// be read by a human with socat and jq while debugging, and it needs
// nothing beyond the standard library; bytes (output, stdin) travel as
// base64, which MaxRead (4 MiB per read) keeps inside a frame. Strings
// must be UTF-8 (JSON would silently replace invalid bytes), which guest
// strings are by WIT's rules.
//
// A peer that declares a length outside the bounds, sends a body that is
// not JSON, or stops mid-frame for longer than the frame timeout is
// dropped; nothing else is affected.
//
// # Conversation
//
// Frame 1, client → keeper, within the frame timeout of connecting:
//
//	{"id":1,"op":"hello","args":{"protocol_version":1,"client":"capsule-host[123]"}}
//
// Frame 1, keeper → client:
//
//	{"id":1,"result":{"protocol_version":1,"keeper_pid":456,"backend":"keeper"}}
//
// or, for a version it does not speak, an error frame, and then it closes
// the connection:
//
//	{"id":1,"error":{"codes":["protocol_version"],"message":"...","supported":[1]}}
//
// Then any number of requests, each with a client-chosen id unique among
// the client's requests in flight; the keeper answers each exactly once,
// in any order (a wait may be answered long after later reads):
//
//	{"id":7,"op":"read","args":{"ref":"9f..","stream":"stdout","offset":0,"max":65536}}
//	{"id":7,"result":{"data":"aGVsbG8K","next":6,"dropped":0,"eof":false,
//	                  "state":{"end":6,"closed":false,"dropped":0,"retained":6}}}
//	{"id":8,"error":{"codes":["not_found"],"message":"process 9e..: process not found"}}
//
// Error codes name the seam's error classes (not_found, running, closed,
// bad_offset, graceful_timeout, invalid_spec, spawn with errno and argv0,
// ...); an error belonging to several classes carries every name, and
// the client rebuilds errors that satisfy the same errors.Is.
//
// # Operations
//
//	start        {spec}                      → {ref, pid}
//	list         {}                          → {procs: [{ref, pid, phase, label, exit?}]}
//	inspect      {ref}                       → {ref, pid, phase, label, exit?} (unknown: phase "missing")
//	read         {ref, stream, offset, max}  → {data, next, dropped, eof, state, err?} (OutputLog.ReadFrom)
//	drain        {ref, stream, max}          → same (OutputLog.Drain; the cursor lives in the keeper)
//	ack          {ref, stream, offset}       → state
//	log_state    {ref, stream}               → state {end, closed, dropped, retained}
//	watch        {ref, stdout, stderr, exit} → {stdout: state, stderr: state, exited}
//	watch_all    {since}                     → {gen, full, procs: [{ref, stdout, stderr, exited, gone?}]}
//	write_stdin  {ref, data}                 → {n}; a failure carries n, the torn count
//	close_stdin  {ref}                       → {}
//	signal       {ref, signal}               → {}
//	terminate    {ref, mode}                 → {exit} (mode "graceful" | "force")
//	wait         {ref}                       → {exit}, once settled and recorded
//	stats        {ref}                       → {cpu_time_ns?, memory_peak?}
//	cleanup      {ref}                       → {}
//	cancel       {target}                    → {} (ends request id target's wait or watch)
//	shutdown     {stop_all}                  → {}, then the keeper exits
//
// watch answers once a stream's end passes the given offset (or the
// stream closes; a negative offset does not watch that stream) or, with
// exit, once the process settled; it answers at once if that already
// happened, which is what makes RemoteLog.Changed free of lost wake-ups.
// watch_all is the feed (feed.go): one long poll per connection that
// answers with the state of every process changed after generation since
// (all of them, full, for since 0), so a client follows every process
// with one request in flight instead of one per stream and process.
// A keeper without it (an older one) answers ErrProtocol; clients then
// fall back to watch and wait.
// An exit is {code, signal, killed_for, at, reason}, reason "exited" or
// "keeper-lost".
//
// # What a keeper crash costs
//
// The processes' pipes end in the keeper. When it dies (SIGKILL, OOM),
// a process that writes output gets SIGPIPE (or EPIPE) at its next write
// and usually dies; a silent one lingers without an owner, and so does
// everything it started. The next keeper on the directory makes that
// deterministic before it serves: for every process without an exit
// record it kills the members of the recorded session and the root
// (identified by PID and start time; see killOrphan), then local.New
// sweeps the dead keeper's cgroups, which also catches descendants that
// left the session (without cgroups those escape, as in the local
// backend), and it writes keeper-lost exit records: Signal SIGKILL if it
// killed the root, Code -1 if the root had already died unseen. With
// cgroups the end may come sooner: any capsule-host process that starts
// a local backend on the machine (a daemon, another keeper) sweeps the
// cgroups of dead hosts, a dead keeper's among them, and the next keeper
// then finds those roots dead (Code -1). Their
// logs read as empty and closed: the spill files stay in the process's
// directory until cleanup, but a spill header lags up to 1 MiB behind
// the data, so they are not served. A process that settled before the
// crash keeps its real exit record and its output (spill file).
package keeper
