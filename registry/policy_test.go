package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// A guest's PATH cannot steer an allowed program: a shell the capsule may
// run, given PATH=<workspace>/bin, would run the guest's own "helper"
// (as git and make run theirs). The spawn is refused, naming PATH, and
// the process's PATH is the host's.
func TestGuestPathRefused(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.HostEnv = []string{"PATH=/usr/bin:/bin"} })
	alice := as("cap", "alice")
	ws := filepath.Join(e.ws, "cap", "alice")
	if err := os.MkdirAll(filepath.Join(ws, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "bin", "helper"), []byte("#!/bin/sh\necho pwned\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	req := SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "helper; echo PATH=$PATH"}, Env: []EnvVar{{"PATH", filepath.Join(ws, "bin") + ":/usr/bin:/bin"}}}
	res, err := e.r.Spawn(alice, req)
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(fmt.Sprint(err), `"PATH"`) {
		t.Fatalf("guest PATH: %v (stdout %q); want invalid-input naming PATH", err, res.Stdout)
	}
	for _, k := range []string{"SHELLOPTS", "PS4", "BASHOPTS", "IFS", "GIT_SSH_COMMAND", "GIT_CONFIG_COUNT"} {
		_, err := e.r.Spawn(alice, SpawnRequest{Cmd: "/bin/true", Env: []EnvVar{{k, "x"}}})
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(fmt.Sprint(err), `"`+k+`"`) {
			t.Errorf("%s: %v; want invalid-input naming it", k, err)
		}
	}
	req.Env = nil
	res, err = e.r.Spawn(alice, req)
	if err != nil || strings.Contains(string(res.Stdout), "pwned") || !strings.Contains(string(res.Stdout), "PATH=/usr/bin:/bin\n") {
		t.Fatalf("host PATH: %q %v", res.Stdout, err)
	}
	if got := e.r.HostPath(); got != "/usr/bin:/bin" {
		t.Errorf("HostPath %q", got)
	}
}
