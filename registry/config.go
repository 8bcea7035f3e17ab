package registry

import (
	"fmt"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Bounds that no configuration can exceed.
const (
	minRingBytes        = 4 << 10
	maxRingBytes        = 8 << 20
	exitRetentionCeil   = time.Hour
	maxLabelBytes       = 128
	stdinBlockedAfter   = 20 * time.Millisecond // a write slower than this "blocked" (stdin-drained)
	maxEventBatch       = 1024
	forceTerminateBound = 30 * time.Second // plus Drain: how long a forced terminate may take
)

// DefaultConfig returns the documented defaults (Backends, Policies,
// HostEnv, StateDir and Logger are left for the host to set).
func DefaultConfig() Config {
	return Config{
		Quotas: Quotas{MaxConcurrent: 8, MaxRetained: 32, MaxEntries: 256},
		Defaults: Defaults{
			LogRingBytes:    1 << 20,
			SpillBytes:      64 << 20,
			OutputRate:      sandbox.OutputRate{BytesPerSec: 4 << 20, Burst: 16 << 20},
			MaxLifetime:     6 * time.Hour,
			IdleTimeout:     30 * time.Minute,
			ExitRetention:   5 * time.Minute,
			WaitCap:         60 * time.Second,
			StopGrace:       5 * time.Second,
			StopGraceCap:    30 * time.Second,
			SpawnTimeout:    10 * time.Minute,
			Drain:           2 * time.Second,
			StdinWriteMax:   1 << 20,
			StdinPreludeMax: 4 << 20,
			ReadMax:         4 << 20,
			EventRetention:  1024,
			ReapInterval:    time.Second,
		},
	}
}

// withDefaults fills zero fields from DefaultConfig and clamps the rest to
// the hard bounds, so the rest of the package never sees a zero bound.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	fillInt(&c.Quotas.MaxConcurrent, d.Quotas.MaxConcurrent)
	fillInt(&c.Quotas.MaxRetained, d.Quotas.MaxRetained)
	fillInt(&c.Quotas.MaxEntries, d.Quotas.MaxEntries)
	x, dd := &c.Defaults, d.Defaults
	fillInt(&x.LogRingBytes, dd.LogRingBytes)
	x.LogRingBytes = clampInt(x.LogRingBytes, minRingBytes, maxRingBytes)
	if x.SpillBytes == 0 {
		x.SpillBytes = dd.SpillBytes
	}
	if x.SpillBytes < 0 { // negative: spill disabled
		x.SpillBytes = 0
	}
	x.OutputRate = outputRate(x.OutputRate, dd.OutputRate)
	fillDur(&x.MaxLifetime, dd.MaxLifetime)
	fillDur(&x.IdleTimeout, dd.IdleTimeout)
	fillDur(&x.ExitRetention, dd.ExitRetention)
	x.ExitRetention = min(x.ExitRetention, exitRetentionCeil)
	fillDur(&x.WaitCap, dd.WaitCap)
	fillDur(&x.StopGrace, dd.StopGrace)
	fillDur(&x.StopGraceCap, dd.StopGraceCap)
	x.StopGrace = min(x.StopGrace, x.StopGraceCap)
	fillDur(&x.SpawnTimeout, dd.SpawnTimeout)
	fillDur(&x.Drain, dd.Drain)
	fillInt(&x.StdinWriteMax, dd.StdinWriteMax)
	fillInt(&x.StdinPreludeMax, dd.StdinPreludeMax)
	fillInt(&x.ReadMax, dd.ReadMax)
	fillInt(&x.EventRetention, dd.EventRetention)
	fillDur(&x.ReapInterval, dd.ReapInterval)
	return c
}

// Policies are the backends' policy data (Config.Policies), a copy: the
// host checks manifests against what the registry will enforce.
func (r *Registry) Policies() map[string]sandbox.BackendPolicy {
	out := make(map[string]sandbox.BackendPolicy, len(r.cfg.Policies))
	for n, p := range r.cfg.Policies {
		out[n] = p
	}
	return out
}

// DefaultPath is the PATH of the exec check when Config.HostEnv has none.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// HostPath is the PATH bare commands are looked up on, by the exec check
// and by the processes themselves: Config.HostEnv's (the host sets it; a
// guest's PATH is refused, see sandbox.BuildEnv), else DefaultPath. The
// host resolves a manifest's bare exec entries on the same PATH.
func (r *Registry) HostPath() string { return envPath(r.cfg.HostEnv) }

func fillInt(p *int, d int) {
	if *p <= 0 {
		*p = d
	}
}

func fillDur(p *time.Duration, d time.Duration) {
	if *p <= 0 {
		*p = d
	}
}

func clampInt(v, lo, hi int) int { return max(lo, min(v, hi)) }

// lower returns the capsule's value when it is set and lower than the
// host's: a manifest can only lower a host cap.
func lower(host, capsule int) int {
	if capsule > 0 && capsule < host {
		return capsule
	}
	return host
}

func (r *Registry) quotasFor(p *CapsulePolicy) Quotas {
	h := r.cfg.Quotas
	return Quotas{
		MaxConcurrent: lower(h.MaxConcurrent, p.Quotas.MaxConcurrent),
		MaxRetained:   lower(h.MaxRetained, p.Quotas.MaxRetained),
		MaxEntries:    lower(h.MaxEntries, p.Quotas.MaxEntries),
	}
}

// tighten merges a guest limit into the capsule's: the guest can only
// tighten (a zero capsule field means unlimited). A guest zero is invalid
// (it would mean "no memory", not "no limit").
func tighten[T int | int64 | time.Duration](name string, capsule T, guest *T) (T, error) {
	if guest == nil {
		return capsule, nil
	}
	if *guest <= 0 {
		return 0, fmt.Errorf("%w: limits.%s must be > 0", ErrInvalidInput, name)
	}
	if capsule == 0 || *guest < capsule {
		return *guest, nil
	}
	return capsule, nil
}

// effectiveLimits is the capsule's limits tightened by the guest's.
func effectiveLimits(capsule sandbox.Limits, g Limits) (sandbox.Limits, error) {
	var out sandbox.Limits
	var err error
	if g.MaxMemoryBytes != nil && *g.MaxMemoryBytes > 1<<62 {
		return out, fmt.Errorf("%w: limits.max-memory-bytes too large", ErrInvalidInput)
	}
	var mem *int64
	if g.MaxMemoryBytes != nil {
		v := int64(*g.MaxMemoryBytes)
		mem = &v
	}
	if out.MemoryBytes, err = tighten("max-memory-bytes", capsule.MemoryBytes, mem); err != nil {
		return out, err
	}
	if out.CPUTime, err = tighten("max-cpu-ms", capsule.CPUTime, g.MaxCPU); err != nil {
		return out, err
	}
	var pids, files *int
	if g.MaxPids != nil {
		v := int(*g.MaxPids)
		pids = &v
	}
	if g.MaxOpenFiles != nil {
		v := int(*g.MaxOpenFiles)
		files = &v
	}
	if out.Pids, err = tighten("max-pids", capsule.Pids, pids); err != nil {
		return out, err
	}
	if out.OpenFiles, err = tighten("max-open-files", capsule.OpenFiles, files); err != nil {
		return out, err
	}
	return out, nil
}

// outputRate fills an unset rate or burst from the default; a negative
// rate means unbounded.
func outputRate(r, d sandbox.OutputRate) sandbox.OutputRate {
	if r.BytesPerSec < 0 {
		return sandbox.OutputRate{}
	}
	if r.BytesPerSec == 0 {
		r.BytesPerSec = d.BytesPerSec
	}
	if r.Burst <= 0 {
		r.Burst = d.Burst
	}
	return r
}
