package local

// SweepStale exposes the stale-host sweep (run once per process by New).
var SweepStale = sweepStale
