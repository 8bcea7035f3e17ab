package registry

import (
	"context"
	"time"
)

// reapLoop is the one reaper. Each tick it applies the time-based rungs of
// the reap ladder; the explicit rungs (stop/release, eviction, removal)
// are applied by their callers. Whatever claims a process first records
// its reason (claimLocked), so the first rung reached wins.
func (r *Registry) reapLoop() {
	defer close(r.reaperDone)
	t := time.NewTicker(r.cfg.Defaults.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-r.reaperStop:
			return
		case <-t.C:
			r.sweep()
		}
	}
}

// sweep applies, in ladder order: exit-retention expiry, max lifetime,
// idle timeout. Terminations run in their own goroutines (a graceful stop
// may take StopGrace) so one slow process never delays the others.
func (r *Registry) sweep() {
	now := r.now()
	var expired, ending []*proc
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	for p := range r.all {
		if p.h == nil {
			continue
		}
		if p.exited {
			if p.persistent && now.Sub(p.exitAt) >= p.retention {
				r.forgetLocked(p)
				expired = append(expired, p)
			}
			continue
		}
		switch {
		case now.Sub(p.started) >= p.maxLifetime:
			if r.claimLocked(p, ReasonLifetime) {
				ending = append(ending, p)
			}
		case p.persistent && now.Sub(p.lastTouch) >= p.idle:
			if r.claimLocked(p, ReasonIdle) {
				ending = append(ending, p)
			}
		}
	}
	for k, t := range r.tombs {
		if now.After(t.until) {
			delete(r.tombs, k)
		}
	}
	r.workers.Add(len(ending))
	r.mu.Unlock()
	for _, p := range expired {
		r.log.Info("exit retention expired: process forgotten", p.attrs()...)
		r.cleanup(p)
	}
	for _, p := range ending {
		go func() {
			defer r.workers.Done()
			r.mu.Lock()
			reason := p.reason
			r.mu.Unlock()
			r.log.Info("reaping process", append(p.attrs(), "reason", reason.String())...)
			if _, err := r.terminate(context.Background(), p, r.cfg.Defaults.StopGrace); err != nil {
				r.log.Error("reap: terminate failed", append(p.attrs(), "err", err)...)
			}
			r.recordExit(p)
		}()
	}
}
