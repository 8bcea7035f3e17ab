package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/process"
	"github.com/capsule-host/capsule-host/registry"
)

// pool holds one capsule's instances.
//
// Policy (why: RFC.md §4 "Why a FIFO pool?"):
//   - at most max instances live; a caller beyond that waits for a free
//     one until its deadline;
//   - idle instances are reused FIFO, so consecutive calls rotate across
//     instances: nothing can come to depend on instance-local state;
//   - min_idle instances are kept warm; idle instances beyond that are
//     evicted after idle_ttl;
//   - an instance that trapped or was interrupted is discarded.
//
// tokens is a semaphore of max slots: a slot is held by every caller from
// acquire to put and by the warmer while it creates an instance, so
// live = idle + busy <= max holds without a condition variable, and a
// waiting caller can give up when its context ends.
type pool struct {
	h      *Host
	c      *Capsule
	tokens chan struct{}
	share  *shareGate // per-principal bound in front of tokens (fair.go)
	logs   *logLimit  // guest stdout/stderr records, all instances (logwriter.go)

	mu         sync.Mutex
	idle       []*instance // FIFO: put appends, acquire takes the front
	live       int
	busy       int
	closed     bool
	warming    bool
	drained    chan struct{} // closed when closed && live == 0
	finishOnce sync.Once
	stop       chan struct{}
	started    bool
	created    uint64
	discards   uint64
	evicted    uint64
}

// instance is one pooled guest instance.
type instance struct {
	id        uint64
	ei        engine.Instance
	proc      *process.Instance
	idleSince time.Time
	stdout    *lineLog
	stderr    *lineLog
	principal string // whose share unit the current call holds (acquire)
}

func newPool(h *Host, c *Capsule) *pool {
	return &pool{
		h:       h,
		c:       c,
		tokens:  make(chan struct{}, c.Manifest.Pool.Max),
		share:   newShareGate(c.Manifest.Pool.Max, c.Manifest.Pool.MaxPerPrincipal),
		logs:    newLogLimit(h.log.With("capsule", c.Name()), h.cfg.GuestLogLinesPerSec, h.cfg.GuestLogBurst),
		drained: make(chan struct{}),
		stop:    make(chan struct{}),
	}
}

// start begins warming and eviction.
func (p *pool) start() {
	p.mu.Lock()
	p.started = true
	p.mu.Unlock()
	p.warm()
	go p.evictLoop()
}

func (p *pool) newInstance(ctx context.Context) (*instance, error) {
	id := p.h.nextInstance.Add(1)
	name := fmt.Sprintf("%s#%d", p.c.Name(), id)
	log := p.h.log.With("capsule", p.c.Name(), "instance", id)
	in := &instance{
		id:     id,
		proc:   process.NewInstance(),
		stdout: newLineLog(log, "stdout", p.logs),
		stderr: newLineLog(log, "stderr", p.logs),
	}
	in.proc.Log = log
	// Instantiation runs the start function and _initialize, which may
	// spin or call host functions: give it the same per-call context and
	// bound a tool call gets, so a hostile guest cannot hang Load (which
	// holds loadMu, and so Close) or pin a warmer slot forever: bounded by
	// Config.InstantiateTimeout.
	ctx, cancel := context.WithTimeout(ctx, p.h.cfg.InstantiateTimeout)
	defer cancel()
	ictx := p.h.callContext(ctx, in, registry.Caller{Capsule: p.c.Name(), Principal: p.h.cfg.OwnerPrincipal(p.c.Name()), Fallback: true})
	ei, err := p.c.mod.Instantiate(ictx, engine.InstanceConfig{Name: name, Stdout: in.stdout, Stderr: in.stderr,
		MemoryLimitPages: uint32(p.c.memLimit / wasmPage)})
	if err != nil {
		_ = in.proc.Reset(context.WithoutCancel(ictx))
		return nil, err
	}
	in.ei = ei
	// Handles opened during instantiation belong to no call: drop them now
	// (an ephemeral one reaps its process), so every instance enters the
	// pool with an empty table, as release leaves it.
	if in.proc.Handles() > 0 {
		log.Warn("the guest opened process handles while instantiating; dropping them", "handles", in.proc.Handles())
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ictx), resetTimeout)
		err := in.proc.Reset(rctx)
		rcancel()
		if err != nil {
			log.Warn("instance reset: dropping handles failed", "err", err)
		}
	}
	p.mu.Lock()
	p.created++
	p.mu.Unlock()
	return in, nil
}

// minInstantiateTimeout is the least default bound of one instantiation
// (see Config.InstantiateTimeout).
const minInstantiateTimeout = 10 * time.Second

// acquire returns an idle instance or creates one, waiting for a unit of
// the principal's share (ctx's, see shareGate) and then a slot until ctx
// ends. The caller must put it back.
func (p *pool) acquire(ctx context.Context) (*instance, error) {
	key := shareKey(ctx)
	if err := p.share.enter(ctx, key, p.stop); err != nil {
		return nil, err
	}
	in, err := p.acquireSlot(ctx)
	if err != nil {
		p.share.leave(key)
		return nil, err
	}
	in.principal = key
	return in, nil
}

// acquireSlot is acquire's slot and instance, once the share is held.
func (p *pool) acquireSlot(ctx context.Context) (*instance, error) {
	select {
	case p.tokens <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.stop:
		return nil, errPoolClosed
	}
	if err := ctx.Err(); err != nil { // both were ready: the deadline wins
		<-p.tokens
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.tokens
		return nil, errPoolClosed
	}
	var in *instance
	if len(p.idle) > 0 {
		in = p.idle[0]
		p.idle[0] = nil
		p.idle = p.idle[1:]
	} else {
		// Every other live instance is held by another slot holder, so
		// live < max here: reserve one.
		p.live++
	}
	p.busy++
	needWarm := len(p.idle) < p.c.Manifest.Pool.MinIdle
	p.mu.Unlock()
	if needWarm {
		p.warm()
	}
	if in != nil {
		return in, nil
	}
	in, err := p.newInstance(ctx)
	if err != nil {
		p.mu.Lock()
		p.busy--
		p.mu.Unlock()
		p.unreserve()
		<-p.tokens
		return nil, err
	}
	return in, nil
}

// unreserve counts one live instance, or one reservation whose instance
// was never made, gone. The last one of a closed pool finishes it: a
// reload may close the pool while an instance is being made for a call
// whose deadline then interrupts it, and a reservation given back without
// this check left Host.Close waiting forever (a component-form hammer
// hung so; TestPoolClosedWhileInstantiating).
func (p *pool) unreserve() {
	p.mu.Lock()
	p.live--
	done := p.closed && p.live == 0
	p.mu.Unlock()
	if done {
		p.finish()
	}
}

var errPoolClosed = fmt.Errorf("%w: capsule was removed or reloaded", ErrUnknownCapsule)

// put returns an instance after a call: its handles are dropped (an
// ephemeral process is reaped, an attached one detached), then it goes to
// the back of the idle queue, or is closed when discard is set or the
// pool is closing. Releases the caller's slot.
func (p *pool) put(ctx context.Context, in *instance, discard bool) {
	key := in.principal
	p.release(ctx, in, discard)
	p.mu.Lock()
	p.busy--
	p.mu.Unlock()
	<-p.tokens
	p.share.leave(key)
}

// release resets in and files it as idle or closes it; no slot change.
func (p *pool) release(ctx context.Context, in *instance, discard bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resetTimeout)
	defer cancel()
	if err := in.proc.Reset(rctx); err != nil {
		p.h.log.Warn("instance reset: dropping handles failed", "capsule", p.c.Name(), "instance", in.id, "err", err)
	}
	in.stdout.flush()
	in.stderr.flush()
	p.mu.Lock()
	if !discard && !p.closed {
		in.idleSince = time.Now()
		p.idle = append(p.idle, in)
		p.mu.Unlock()
		return
	}
	if discard {
		p.discards++
	}
	p.mu.Unlock()
	p.closeInstance(in)
	if discard {
		p.warm()
	}
}

func (p *pool) closeInstance(in *instance) {
	_ = in.ei.Close(context.Background())
	p.unreserve()
}

// finish closes the module once the last instance of a closed pool is
// gone: closing it under a running instance is not safe in every engine.
func (p *pool) finish() {
	p.finishOnce.Do(func() {
		_ = p.c.mod.Close(context.Background())
		close(p.drained)
	})
}

// warm tops the idle queue up to min_idle in the background, one instance
// at a time, each under a slot so live never exceeds max.
func (p *pool) warm() {
	p.mu.Lock()
	if p.warming || p.closed || !p.started {
		p.mu.Unlock()
		return
	}
	p.warming = true
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			p.warming = false
			p.mu.Unlock()
		}()
		for {
			// The warmer holds a slot while it creates, so a caller that
			// finds no idle instance can always create one; and it only
			// creates below max, counting idle instances too.
			select {
			case p.tokens <- struct{}{}:
			default:
				return // every slot is busy: the pool is at max
			}
			p.mu.Lock()
			need := !p.closed && len(p.idle) < p.c.Manifest.Pool.MinIdle && p.live < p.c.Manifest.Pool.Max
			if need {
				p.live++
			}
			p.mu.Unlock()
			if !need {
				<-p.tokens
				return
			}
			in, err := p.newInstance(context.Background())
			if err != nil {
				p.unreserve()
				<-p.tokens
				p.h.log.Error("warming an instance failed", "capsule", p.c.Name(), "err", err)
				return
			}
			p.mu.Lock()
			closed := p.closed
			if !closed {
				in.idleSince = time.Now()
				p.idle = append(p.idle, in)
			}
			p.mu.Unlock()
			if closed {
				p.closeInstance(in)
			}
			<-p.tokens
		}
	}()
}

func (p *pool) evictLoop() {
	ttl := p.c.Manifest.Pool.IdleTTL
	tick := min(max(ttl/4, 50*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.evict(now)
		}
	}
}

// evict closes idle instances beyond min_idle that have idled for ttl.
// The front of the FIFO queue is the longest idle.
func (p *pool) evict(now time.Time) {
	ttl := p.c.Manifest.Pool.IdleTTL
	var victims []*instance
	p.mu.Lock()
	for len(p.idle) > p.c.Manifest.Pool.MinIdle && now.Sub(p.idle[0].idleSince) >= ttl {
		victims = append(victims, p.idle[0])
		p.idle[0] = nil
		p.idle = p.idle[1:]
		p.evicted++
	}
	p.mu.Unlock()
	for _, in := range victims {
		p.closeInstance(in)
	}
}

// close stops the pool: idle instances close now, busy ones when their
// call ends, the module when the last one is gone.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	done := p.live == 0
	p.mu.Unlock()
	close(p.stop)
	for _, in := range idle {
		p.closeInstance(in)
	}
	if done {
		p.finish()
	}
}

// wait blocks until every instance is closed or ctx ends.
func (p *pool) wait(ctx context.Context) {
	select {
	case <-p.drained:
	case <-ctx.Done():
	}
}

func (p *pool) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Idle: len(p.idle), Busy: p.busy, Live: p.live, Created: p.created, Discarded: p.discards, Evicted: p.evicted}
}
