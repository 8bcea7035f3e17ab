package host

import (
	"context"
	"fmt"
)

// ColdCall runs one call on a brand-new instance and closes it: the
// baseline the warm pool is measured against (instantiate, _initialize,
// call, close; the module is already compiled).
func (c *Capsule) ColdCall(ctx context.Context, tool, input string) (string, error) {
	c.pool.mu.Lock()
	c.pool.live++
	c.pool.mu.Unlock()
	in, err := c.pool.newInstance(ctx)
	if err != nil {
		return "", err
	}
	defer c.pool.closeInstance(in)
	out, toolErr, err := callTool(ctx, in.ei, tool, input)
	if err != nil {
		return "", err
	}
	if toolErr != nil {
		return "", fmt.Errorf("tool error: %s", *toolErr)
	}
	return out, nil
}
