package local

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// helperArg0 marks a re-exec of the host binary as the exec helper.
// Where the binary has cgo, a C constructor does the helper's work before
// the Go runtime starts (helper_cgo.go); this Go helper is the fallback.
//
// Why a helper: cgroup v1 has no CLONE_INTO_CGROUP, and rlimits set with
// prlimit after start leave a window in which the program already runs
// unlimited. The helper (this same binary, re-executed through
// /proc/self/exe) joins the v1 cgroups and sets the rlimits, then execs
// the real program: the program starts limited. It is used only when a
// spec asks for such a limit (or a v1 cgroup must be joined); the common
// path execs the program directly.
//
// The role is registered with sandbox/reexec (registration only): a binary
// becomes the helper only where main or a TestMain calls reexec.Init
// first, never by side effect of linking this package.
//
// Protocol: argv = [helperArg0, "-nofile", N, "-cpu", S, "-join", FILE...,
// "-exec", PATH, "--", program argv...] (-exec: the file to run, when it
// is not the program's argv[0]: ProcessSpec.Path); the helper's own environment is empty; fd 3 is a
// close-on-exec status pipe: EOF means the exec succeeded, otherwise it
// carries "<errno> <message>"; fd 4 carries the program's environment,
// NUL-separated, until EOF.
const helperArg0 = "capsule-host-local-exec"

func init() { reexec.Register(helperArg0, helperMain) }

// helperRole is the argv[0] the helper is started with: helperArg0, which
// the C constructor takes where there is one; the tests also run the Go
// helper under a role it does not take (UseGoHelper).
var helperRole = helperArg0

// helperError is an exec failure reported by the helper; it unwraps to the
// errno so errors.Is(err, fs.ErrNotExist) works as for a direct exec.
type helperError struct {
	errno syscall.Errno
	msg   string
}

func (e *helperError) Error() string { return e.msg }
func (e *helperError) Unwrap() error { return e.errno }

// helperMain is the helper: it runs in reexec.Init, before the host's
// main; args are the flags, "--" and the program's argv.

func helperMain(args []string) int {
	status := os.NewFile(3, "status")
	unix.CloseOnExec(3)
	envFile := os.NewFile(4, "env")
	envData, err := io.ReadAll(envFile)
	envFile.Close()
	fail := func(err error) int {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		fmt.Fprintf(status, "%d %v", int(errno), err)
		return 127
	}
	exec := ""
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return fail(fmt.Errorf("helper: bad arguments"))
		}
		flag, val := args[0], args[1]
		args = args[2:]
		switch flag {
		case "-join":
			if err := os.WriteFile(val, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
				return fail(fmt.Errorf("join cgroup %s: %w", val, err))
			}
		case "-nofile":
			n, _ := strconv.ParseUint(val, 10, 64)
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				return fail(fmt.Errorf("rlimit open-files %d: %w", n, err))
			}
		case "-exec":
			exec = val
		case "-impl": // which helper runs (helper_cgo.go): the tests ask
			fmt.Fprint(status, "0 go")
			return 0
		case "-cpu":
			n, _ := strconv.ParseUint(val, 10, 64)
			// Soft limit: SIGXCPU; hard limit one second later: SIGKILL,
			// for programs that catch or ignore SIGXCPU.
			if err := unix.Setrlimit(unix.RLIMIT_CPU, &unix.Rlimit{Cur: n, Max: n + 1}); err != nil {
				return fail(fmt.Errorf("rlimit cpu %ds: %w", n, err))
			}
		default:
			return fail(fmt.Errorf("helper: unknown flag %q", flag))
		}
	}
	if len(args) < 2 {
		return fail(fmt.Errorf("helper: no program"))
	}
	if err != nil {
		return fail(fmt.Errorf("helper: read env: %w", err))
	}
	env := []string{}
	for _, kv := range bytes.Split(envData, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	argv := args[1:]
	if exec == "" {
		exec = argv[0]
	}
	return fail(retryBusy(func() error { return syscall.Exec(exec, argv, env) }))
}
