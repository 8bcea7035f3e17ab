package local

// SweepStale exposes the stale-host sweep (run once per process by New).
var SweepStale = sweepStale

// HelperArg0 is the exec helper's reexec role name.
const HelperArg0 = helperArg0

// PoolGroupPrefix begins the names of this process's pooled cgroups.
func PoolGroupPrefix() string { return hostTag + "-pool" }
