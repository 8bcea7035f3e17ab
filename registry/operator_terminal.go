package registry

import (
	"context"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/terminal"
)

// The operator's terminal and wait-for calls (the daemon's operator API,
// `capsule-host screen/send/wait`): any persistent process, whoever owns
// it; like the other Operator* calls they do not restart its idle clock.

// OperatorSnapshot is Snapshot for the operator.
func (r *Registry) OperatorSnapshot(ctx context.Context, id string, scrollback uint32) (Screen, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return Screen{}, err
	}
	_, ts, err := hasTerminal(p)
	if err != nil {
		return Screen{}, err
	}
	return r.snapshot(ctx, ts, scrollback), nil
}

// OperatorSendKeys is SendKeys for the operator.
func (r *Registry) OperatorSendKeys(ctx context.Context, id string, keys []terminal.Key) (int, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return 0, err
	}
	_, ts, err := hasTerminal(p)
	if err != nil {
		return 0, err
	}
	r.log.Info("operator send-keys", append(p.attrs(), "keys", len(keys))...)
	return r.sendKeys(ctx, p, ts, keys)
}

// OperatorPaste is Paste for the operator.
func (r *Registry) OperatorPaste(ctx context.Context, id string, text []byte, submit bool) (int, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return 0, err
	}
	_, ts, err := hasTerminal(p)
	if err != nil {
		return 0, err
	}
	r.log.Info("operator paste", append(p.attrs(), "bytes", len(text))...)
	return r.paste(ctx, p, ts, text, submit)
}

// OperatorWaitFor is WaitFor for the operator (same bound and cap).
func (r *Registry) OperatorWaitFor(ctx context.Context, id string, cond WaitCondition, timeout time.Duration) (WaitResult, error) {
	p, err := r.operatorResolve(id)
	if err != nil {
		return WaitResult{}, err
	}
	return r.waitFor(ctx, p, cond, timeout)
}
