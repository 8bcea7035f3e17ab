// Package reexec is the one explicit entry point by which the capsule-host
// binary (or a test binary) becomes one of the backends' helper processes:
// the local backend's exec helper, the OCI monitor, and later the keeper.
//
// A backend registers its role by name, typically in an init function;
// registering has no other effect. The binary turns into the helper only
// when main (or TestMain) calls Init, in the manner of docker's
// reexec.Init and runc's init: nothing happens by side effect of linking a
// package.
//
//	func main() {
//		if reexec.Init() {
//			return // unreachable: Init exits after running a role
//		}
//		...
//	}
//
// The role is chosen by argv[0], which Command sets; the role's main gets
// the remaining arguments and its return value is the exit code.
package reexec

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	mu    sync.RWMutex
	roles = map[string]func(args []string) int{}
)

// Register makes name a role. It panics on an empty or duplicate name: a
// programming error, found by the first test run.
func Register(name string, main func(args []string) int) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || main == nil {
		panic("reexec: empty role")
	}
	if _, dup := roles[name]; dup {
		panic(fmt.Sprintf("reexec: role %q registered twice", name))
	}
	roles[name] = main
}

// Init runs the role named by os.Args[0], if there is one, and exits with
// its code. It returns false when this process is not a helper.
//
// Before anything else it seals the descriptors this process inherited
// (see SealInherited): Init is the first thing main runs, in the daemon and
// in every helper, so it is the one place that covers them all.
func Init() bool {
	SealInherited()
	if len(os.Args) == 0 {
		return false
	}
	mu.RLock()
	main, ok := roles[os.Args[0]]
	mu.RUnlock()
	if !ok {
		return false
	}
	os.Exit(main(os.Args[1:]))
	return true
}

// SealInherited marks every descriptor above stderr close-on-exec. The
// kernel hands a child every descriptor without that flag, and os/exec
// closes none of them, so whatever the daemon's launcher left open (a CI
// runner's output pipe, a terminal, a lock) would otherwise reach every
// keeper and workload: a workload holding the write end of its launcher's
// pipe keeps that reader from ever seeing EOF. Descriptors a helper is
// given on purpose (ExtraFiles) stay usable: the flag only stops them
// from passing through the helper's own exec, which is what each helper
// wants (its status pipe reports a successful exec by closing).
func SealInherited() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Before Linux 5.11: one fcntl per open descriptor.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// Self is the path by which this binary re-executes itself. /proc/self/exe
// keeps working when the file was replaced (an upgrade in place).
const Self = "/proc/self/exe"

// Command returns a command that runs role name in a fresh copy of this
// binary, with args after it.
func Command(name string, args ...string) *exec.Cmd {
	c := exec.Command(Self, args...)
	c.Args = append([]string{name}, args...)
	return c
}

// Registered reports whether name is a role (for tests and diagnostics).
func Registered(name string) bool {
	mu.RLock()
	defer mu.RUnlock()
	_, ok := roles[name]
	return ok
}
