//go:build leanclient

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// The lean client build (go build -tags leanclient) links only the
// client commands: the full binary's package init (the JSON Schema
// compiler's meta-schemas, the engines, the registry, the backends) cost
// more than a whole tmux client run. Every other command (serve, demo,
// validate, pin, wit, version, token, help) is handed, with the same
// arguments, to the full binary, capsule-hostd.
func init() { fallback = execFull }

// fullName is the full binary the lean client hands commands to.
const fullName = "capsule-hostd"

// execFull replaces this process with the full binary running args: the
// exit code, signals and terminal are then the full binary's own. It
// returns only when the full binary cannot be found or started.
func execFull(args []string, stderr io.Writer) int {
	path, err := findFull()
	if err == nil {
		err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	}
	fmt.Fprintf(stderr, "capsule-host: this is the lean client; the command needs the full binary %s: %v\n"+
		"Install it next to this one (go build -o %s ./cmd/capsule-host) or name it in $CAPSULE_HOSTD.\n",
		fullName, err, filepath.Join(filepath.Dir(selfPath()), fullName))
	return exitFailed
}

// findFull looks for the full binary: $CAPSULE_HOSTD, else next to this
// executable, else on $PATH.
func findFull() (string, error) {
	if p := os.Getenv("CAPSULE_HOSTD"); p != "" {
		return p, nil
	}
	if p := filepath.Join(filepath.Dir(selfPath()), fullName); isExecutable(p) {
		return p, nil
	}
	return exec.LookPath(fullName)
}

func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return fullName
	}
	return p
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
