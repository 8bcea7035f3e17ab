package sandbox

import (
	"fmt"
	"time"
)

// OutputRate bounds how fast one output stream is captured: a token
// bucket of Burst bytes refilled at BytesPerSec. A stream over its rate is
// throttled, not truncated: the pump stops reading the pipe until the
// bucket refills, so the process blocks in write(2) and no byte is lost
// or reordered. What the bound protects is everyone else: the capturing
// process's CPU (one pump copying a `yes` flood costs a core), the spill
// file's disk bandwidth, and the daemon's log readers. The disk volume is
// bounded separately, by the spill cap (OutputLogConfig.SpillBytes),
// beyond which DropOldest counts drops and Backpressure blocks.
type OutputRate struct {
	// BytesPerSec is the sustained rate (0: unbounded).
	BytesPerSec int64
	// Burst is what a quiet stream may write at once (0: one second's
	// worth, BytesPerSec).
	Burst int64
}

func (r OutputRate) validate() error {
	if r.BytesPerSec < 0 || r.Burst < 0 {
		return fmt.Errorf("output rate: %d bytes/s, burst %d: must be >= 0: %w", r.BytesPerSec, r.Burst, ErrInvalidSpec)
	}
	if r.BytesPerSec == 0 && r.Burst != 0 {
		return fmt.Errorf("output rate: a burst (%d) needs a rate: %w", r.Burst, ErrInvalidSpec)
	}
	return nil
}

// rateBucket is OutputRate's state, guarded by the log's mutex. tokens
// may go negative: a final sweep or a pump that read more than it was
// allowed is charged, and the next read waits for the debt.
type rateBucket struct {
	rate, burst int64
	tokens      int64
	at          time.Time
	throttled   time.Duration // total time the writer was held back
	throttles   int64         // how many times it was
	heldSince   time.Time     // zero unless held back now
}

func newRateBucket(r OutputRate, now time.Time) rateBucket {
	if r.BytesPerSec == 0 {
		return rateBucket{}
	}
	burst := r.Burst
	if burst == 0 {
		burst = r.BytesPerSec
	}
	return rateBucket{rate: r.BytesPerSec, burst: burst, tokens: burst, at: now}
}

func (b *rateBucket) refill(now time.Time) {
	if el := now.Sub(b.at); el > 0 {
		// In float: rate × elapsed overflows int64 nanoseconds at GB/s.
		b.tokens = min(b.burst, b.tokens+int64(float64(b.rate)*el.Seconds()))
		b.at = now
	}
}

// allow is how many bytes may be read now, or how long until some may.
func (b *rateBucket) allow(now time.Time) (int64, time.Duration) {
	if b.rate == 0 {
		return 1 << 62, 0
	}
	b.refill(now)
	// A useful amount, not a byte: a pump woken for a few tokens would
	// spin on tiny reads. 1/64 s of rate, at least 4 KiB, at most the burst.
	step := min(b.burst, max(4<<10, b.rate/64))
	if b.tokens >= step {
		if !b.heldSince.IsZero() {
			b.throttled += now.Sub(b.heldSince)
			b.heldSince = time.Time{}
		}
		return b.tokens, 0
	}
	if b.heldSince.IsZero() {
		b.heldSince, b.throttles = now, b.throttles+1
	}
	need := step - b.tokens
	return 0, max(time.Millisecond, time.Duration(float64(need)/float64(b.rate)*float64(time.Second)))
}

// take charges n written bytes.
func (b *rateBucket) take(n int64, now time.Time) {
	if b.rate == 0 {
		return
	}
	b.refill(now)
	b.tokens -= n
}
