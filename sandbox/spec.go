package sandbox

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Validate refuses a spec with a missing or invalid field, naming the
// field, with an error wrapping ErrInvalidSpec. Backends call it first;
// it applies no defaults. It refuses any Terminal: backends that run
// terminals call ValidateTerminal instead.
func (s *ProcessSpec) Validate() error {
	if s.Terminal != nil {
		return fmt.Errorf("terminal: not supported by this backend: %w", ErrInvalidSpec)
	}
	return s.validate()
}

// ValidateTerminal is Validate for a backend that runs terminals: a
// Terminal is checked (size, TERM, stdin open) instead of refused.
func (s *ProcessSpec) ValidateTerminal() error {
	if s.Terminal != nil {
		if err := s.Terminal.check(s.Stdin.Mode); err != nil {
			return err
		}
	}
	return s.validate()
}

func (s *ProcessSpec) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, ErrInvalidSpec)...)
	}
	if len(s.Argv) == 0 {
		return bad("argv: empty")
	}
	if !filepath.IsAbs(s.Argv[0]) {
		return bad("argv[0]: %q is not an absolute path", s.Argv[0])
	}
	for i, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("argv[%d]: contains NUL", i)
		}
	}
	if s.Path != "" && (!filepath.IsAbs(s.Path) || filepath.Clean(s.Path) != s.Path || strings.IndexByte(s.Path, 0) >= 0) {
		return bad("path: %q is not a clean absolute path", s.Path)
	}
	if s.Cwd == "" {
		return bad("cwd: empty")
	}
	if !filepath.IsAbs(s.Cwd) || strings.IndexByte(s.Cwd, 0) >= 0 {
		return bad("cwd: %q is not an absolute path", s.Cwd)
	}
	for i, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return bad("env[%d]: not KEY=VALUE", i)
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return bad("env[%d] (%s): contains NUL", i, k)
		}
	}
	switch s.Stdin.Mode {
	case StdinClosed:
		if len(s.Stdin.Data) > 0 {
			return bad("stdin.data: given with stdin mode closed")
		}
	case StdinBytes, StdinOpen:
	default:
		return bad("stdin.mode: %d is not closed, bytes or open", s.Stdin.Mode)
	}
	o := s.Output
	if o.RingBytes <= 0 {
		return bad("output.ring-bytes: %d must be > 0", o.RingBytes)
	}
	if o.SpillBytes < 0 {
		return bad("output.spill-bytes: %d must be >= 0", o.SpillBytes)
	}
	if o.Overflow != DropOldest && o.Overflow != Backpressure {
		return bad("output.overflow: %d is not drop-oldest or backpressure", o.Overflow)
	}
	if o.SpillBytes > 0 && !filepath.IsAbs(o.SpillDir) {
		return bad("output.spill-dir: %q is not an absolute path", o.SpillDir)
	}
	if err := o.Rate.validate(); err != nil {
		return fmt.Errorf("output.rate: %w", err)
	}
	if s.Grace <= 0 {
		return bad("grace: %v must be > 0", s.Grace)
	}
	if s.Drain <= 0 {
		return bad("drain: %v must be > 0", s.Drain)
	}
	l := s.Limits
	switch {
	case l.MemoryBytes < 0:
		return bad("limits.memory: %d must be >= 0", l.MemoryBytes)
	case l.CPUTime < 0:
		return bad("limits.cpu: %v must be >= 0", l.CPUTime)
	case l.Pids < 0:
		return bad("limits.pids: %d must be >= 0", l.Pids)
	case l.OpenFiles < 0:
		return bad("limits.open-files: %d must be >= 0", l.OpenFiles)
	}
	return nil
}

// ExecFile is the file a backend executes for s: Path, or Argv[0].
func (s *ProcessSpec) ExecFile() string {
	if s.Path != "" {
		return s.Path
	}
	return s.Argv[0]
}

// CheckExecPath re-checks, just before the start, that spec.Path is still
// its own real file: a directory on the way replaced by a symlink since
// the exec-list check fails closed (ErrInvalidSpec naming both paths)
// instead of running whatever the link now reaches.
func CheckExecPath(s *ProcessSpec) error {
	if s.Path == "" {
		return nil
	}
	real, err := filepath.EvalSymlinks(s.Path)
	if err != nil {
		return &SpawnError{Argv0: s.Argv[0], Cause: err}
	}
	if real != s.Path {
		return fmt.Errorf("path: %q (argv[0] %q) now resolves to %q: it changed since the exec check: %w", s.Path, s.Argv[0], real, ErrInvalidSpec)
	}
	return nil
}

// Within reports whether the clean absolute path p is dir or below it.
func Within(dir, p string) bool {
	return dir != "" && (p == dir || dir == "/" || strings.HasPrefix(p, dir+"/"))
}
