package registry

import (
	"errors"
	"slices"
	"testing"

	"github.com/capsule-host/capsule-host/sandbox"
)

// A process's environment starts from Config.HostEnv (its allowlisted
// entries), never from the registry's own environment.
func TestPrepareHostEnv(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.HostEnv = []string{"PATH=/hostenv/bin:/bin", "LANG=C.UTF-8", "REGISTRY_TEST_SECRET=leak"}
	})
	o := owner{capsule: "cap", principal: "alice"}
	pr, err := e.r.prepare(o, SpawnRequest{Cmd: "true"}, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/hostenv/bin:/bin", "LANG=C.UTF-8"}; !slices.Equal(pr.spec.Env, want) {
		t.Errorf("env %q; want %q", pr.spec.Env, want)
	}
	if pr.spec.Argv[0] != "/bin/true" {
		t.Errorf("argv[0] %q: want /bin/true, looked up on HostEnv's PATH", pr.spec.Argv[0])
	}

	bare := newEnv(t, nil)
	if pr, err = bare.r.prepare(o, SpawnRequest{Cmd: "/bin/true"}, nil, false); err != nil || len(pr.spec.Env) != 0 {
		t.Errorf("no HostEnv: env %q, %v; want empty", pr.spec.Env, err)
	}
}

// Where commands resolve is the backend's policy data, whatever its name:
// a backend whose commands run in a root refuses a policy without one,
// and a backend without policy data resolves on the host.
func TestPrepareDecidesByPolicy(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Policies = map[string]sandbox.BackendPolicy{"nocg": {ExecInRoot: true}}
	})
	o := owner{capsule: "cap", principal: "alice"}
	e.register("cap", func(p *CapsulePolicy) { p.Backend = "nocg" })
	if _, err := e.r.prepare(o, SpawnRequest{Cmd: "/bin/true"}, nil, false); !errors.Is(err, ErrUnavailable) {
		t.Errorf("in-root backend without exec root: %v; want ErrUnavailable", err)
	}
	e.register("cap", func(p *CapsulePolicy) { p.Backend = "local" })
	if pr, err := e.r.prepare(o, SpawnRequest{Cmd: "/bin/true"}, nil, false); err != nil || pr.spec.Argv[0] != "/bin/true" {
		t.Errorf("host backend: %v", err)
	}
}
