package oci

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
)

// The container init. A container's first process is the init of its pid
// namespace, and the kernel drops every signal an init has no handler
// for, even SIGKILL from inside: a plain `sleep` would ignore a graceful
// stop, and `kill -TERM $$` in a shell would do nothing. So, when an init
// binary is configured, the backend runs it as pid 1 and the spec's argv
// as its child, which then has ordinary signal semantics, exactly as in
// the local backend.
//
// The init (init/capsule-oci-init.c: one thread, so that it costs one
// pid of the container's budget; statically linked and bind-mounted
// read-only at initMount):
//   - starts the child in its own process group (on a terminal, the
//     foreground group: terminal.go), and forwards every
//     catchable signal it receives to that group;
//   - reports on fd 3 (a pipe to the monitor, close-on-exec, so the child
//     never holds it): "ok\n" once the exec succeeded, or "err <errno>
//     <message>\n"; then "exit <wait status> <cpu ns>\n" when the child
//     exits. The raw wait status keeps "killed by signal n" distinct from
//     "exited with 128+n", which an init's own exit code cannot;
//   - keeps reaping orphans after the child exited, so that descendants
//     still holding the output pipes can write during the drain; the
//     monitor ends them at the drain bound, and the namespace dies with
//     the init.
const (
	initMount = "/dev/.capsule-init"
	initFlag  = "--capsule-init"
)

// isStatic reports whether the ELF file at path has no interpreter, so it
// runs in a rootfs without the host's loader and libraries.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// findInit looks for a static capsule-oci-init beside the host binary,
// then in PATH.
func findInit() string {
	var cands []string
	if self, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(self), "capsule-oci-init"))
	}
	if p, err := exec.LookPath("capsule-oci-init"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if abs, err := filepath.Abs(c); err == nil && isStatic(abs) {
			return abs
		}
	}
	return ""
}
