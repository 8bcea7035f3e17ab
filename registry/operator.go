package registry

import (
	"context"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// The operator views act across principals (host admin APIs, `ps`). They
// never refresh idle clocks: the operator looking is not the owner using.

// OperatorList lists persistent processes matching f (empty fields: all),
// oldest first.
func (r *Registry) OperatorList(f OperatorFilter) []Info {
	var ps []*proc
	r.mu.Lock()
	for _, p := range r.byKey {
		if (f.Capsule == "" || p.own.capsule == f.Capsule) && (f.Principal == "" || p.own.principal == f.Principal) {
			ps = append(ps, p)
		}
	}
	r.mu.Unlock()
	sortProcs(ps)
	if f.Brief {
		return infos(ps, func(i int) Info { return r.brief(ps[i]) })
	}
	snaps := r.figuresOf(context.Background(), ps)
	out := make([]Info, len(ps))
	for i, p := range ps {
		out[i] = r.infoOf(p, snaps[i], 0, true)
	}
	return out
}

func (r *Registry) operatorResolve(id string) (*proc, error) {
	k := r.keyOf(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.byKey[k]
	if p == nil || p.forgotten {
		return nil, ErrNoSuchProcess
	}
	return p, nil
}

func (r *Registry) OperatorStatus(id string) (Info, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return Info{}, err
	}
	in := r.info(p, 0, true)
	sampleInput(&in)
	return in, nil
}

func (r *Registry) OperatorReadSince(id string, s Stream, cursor *string, max uint32) (LogChunk, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return LogChunk{}, err
	}
	return r.readSince(p, s, cursor, max)
}

// OperatorStop stops any process (reason stopped).
func (r *Registry) OperatorStop(ctx context.Context, id string, grace *time.Duration) (Exit, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return Exit{}, err
	}
	r.log.Info("operator stop", p.attrs()...)
	return r.stop(ctx, p, grace)
}

// Changes are what a follower of one process waits on: each channel
// closes at the next write to its stream (nil once the stream is closed,
// so that a follower never spins on it) and Exited at the exit.
type Changes struct {
	Stdout, Stderr, Exited <-chan struct{}
}

// OperatorChanges arms the process's Changes. A follower arms, then
// reads, then waits, so no write between its read and its wait is
// missed. Unlike PollEvents it takes no event from the owner's log: a
// follower consuming log-ready events re-armed them, one new event per
// read, which pushed the owner's unread events (exits of its other
// processes) out of the log's retention.
func (r *Registry) OperatorChanges(id string) (Changes, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return Changes{}, err
	}
	arm := func(l sandbox.Log) <-chan struct{} {
		ch := l.Changed()
		if l.Closed() {
			return nil
		}
		return ch
	}
	return Changes{Stdout: arm(p.h.Stdout()), Stderr: arm(p.h.Stderr()), Exited: p.h.Done()}, nil
}
