package sandbox

// Watchable is a Handle that reports its progress by callback. A reader
// of many processes (the registry turns output into log-ready events and
// records exits) would otherwise park a goroutine per process on Changed
// and Done: 4 KiB of stack per live process, the largest share of the
// daemon's per-process memory (issue 11). The keeper-backed handle learns
// every process's state from one feed per connection, so it can call
// back instead; in-process handles do not need to (their processes are
// the daemon's own, short-lived tool-call spawns).
type Watchable interface {
	// Watch calls f after either stream moved or closed, and after Done
	// was closed, with the newest state the handle knows. Calls may be
	// spurious (nothing changed) and may overlap; f must not block. A
	// handle already settled calls f once, before Watch returns. ok is
	// false when the handle cannot watch (a keeper without the feed): the
	// caller waits on Changed and Done instead. stop ends the calls.
	Watch(f func(WatchState)) (stop func(), ok bool)
}

// WatchState is what a Watch callback reports: each stream's End and
// whether it closed (as its Log would say), and whether the process
// settled. A stream's End may lag its Log's by the feed's latency; the
// final state is read from the Log after Done.
type WatchState struct {
	Stdout, Stderr StreamState
	Done           bool
}

// StreamState is one stream in a WatchState.
type StreamState struct {
	End    int64
	Closed bool
}
