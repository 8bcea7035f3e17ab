package testtools

import (
	"fmt"

	"github.com/capsule-host/capsule-host/capsules/sdk/process"
	"github.com/capsule-host/capsule-host/capsules/sdk/process/ephemeral"
)

// h10 adapts a 1.0.0 handle to handleAPI.
type h10 struct{ *ephemeral.Handle }

func (h h10) Signal(name string) error {
	s, ok := process.ParseSignal(name)
	if !ok || s > ephemeral.SigUsr2 {
		return fmt.Errorf("invalid input: %q is not a 1.0.0 signal (term, hup, int, usr1, usr2)", name)
	}
	return h.Handle.Signal(s)
}

// RegisterV10 registers the capsule:process@1.0.0 tools (prefixed v1_).
func RegisterV10() {
	reg("v1_spawn", "1.0.0 spawn(request).", reqSchema,
		func(r ephemeral.SpawnRequest) (any, error) { return reply(ephemeral.Spawn(r)) })
	reg("v1_spawn_background_ops", "1.0.0 spawn-background(request), then the handle ops, then drop unless keep_handle.",
		opsSchema(`"request"`), func(in opsIn) (any, error) {
			h, err := ephemeral.SpawnBackground(in.Request)
			if err != nil {
				return reply(nil, err)
			}
			raw := h.Raw() // before runOps: Drop zeroes it
			res, err := runOps(h10{h}, in.Ops, in.KeepHandle)
			return reply(map[string]any{"handle": raw, "results": res}, err)
		})
}
