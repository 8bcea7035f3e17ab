package keeper

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Terminals in the keeper: the keeper's embedded local backend opens the
// PTY and holds its master, so a terminal process, its window size and
// its output (the screen's input) survive a daemon restart like any
// persistent process. One operation beyond the spec's terminal field:
//
//	resize  {ref, rows, cols}  → {} (no_terminal: a pipe process, or its terminal is gone)

const opResize = "resize"

type resizeArgs struct {
	Ref  string `json:"ref"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

func init() { handlers[opResize] = (*server).opResize }

func (s *server) opResize(ctx context.Context, raw json.RawMessage) (any, error) {
	a, err := decode[resizeArgs](raw)
	if err != nil {
		return nil, err
	}
	e, err := s.get(a.Ref)
	if err != nil {
		return nil, err
	}
	rz, ok := e.h.(sandbox.Resizer)
	if e.h == nil || !ok {
		return nil, fmt.Errorf("resize %s: %w", a.Ref, sandbox.ErrNoTerminal)
	}
	return none{}, rz.Resize(a.Rows, a.Cols)
}

// Resize sets a terminal process's window size in the keeper.
func (c *Client) Resize(ctx context.Context, ref sandbox.Ref, rows, cols uint16) error {
	id, err := c.id(ref)
	if err != nil {
		return err
	}
	return c.call(ctx, opResize, resizeArgs{Ref: id, Rows: rows, Cols: cols}, nil)
}

// Resize implements sandbox.Resizer over the keeper's socket.
func (h *handle) Resize(rows, cols uint16) error {
	if err := sandbox.CheckTerminalSize(rows, cols); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(h.ctx, opBound)
	defer cancel()
	c, err := h.b.client(ctx)
	if err != nil {
		return err
	}
	return c.Resize(ctx, h.ref, rows, cols)
}

var _ sandbox.Resizer = (*handle)(nil)

// termOf is t's TERM, "" without a terminal.
func termOf(t *sandbox.TerminalSpec) string {
	if t == nil {
		return ""
	}
	return t.Term
}
