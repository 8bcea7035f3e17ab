package registry

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/capsule-host/capsule-host/sandbox"
)

// buildEnv is the process environment: the allowlisted host variables
// (passed explicitly), then the operator's capsule env, then the guest's
// entries. The sandbox helper refuses reserved/malformed keys, naming them.
func buildEnv(host, operator []string, guest []EnvVar) ([]string, error) {
	set := make(map[string]bool, len(guest))
	kv := make([]string, 0, len(operator)+len(guest))
	for _, e := range guest {
		set[e.Key] = true
	}
	for _, e := range operator {
		if k, _, _ := strings.Cut(e, "="); !set[k] {
			kv = append(kv, e)
		}
	}
	for _, e := range guest {
		kv = append(kv, e.Key+"="+e.Value)
	}
	env, err := sandbox.BuildEnv(host, kv)
	if err != nil {
		return nil, mapSandboxErr("env", err)
	}
	return env, nil
}

// confineCwd confines the guest's cwd to the principal's workspace.
func confineCwd(root, rel string) (string, error) {
	d, err := sandbox.ConfineCwd(root, rel)
	switch {
	case err == nil:
		return d, nil
	case errors.Is(err, sandbox.ErrBoundaryEscape):
		return "", mapSandboxErr("cwd", err)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EACCES):
		// The guest's path, not the host, is at fault: never internal.
		if len(rel) > 256 {
			rel = rel[:256] + "..."
		}
		return "", fmt.Errorf("%w: cwd %q is not a directory of the workspace", ErrInvalidInput, rel)
	default:
		return "", mapSandboxErr("cwd", err)
	}
}
