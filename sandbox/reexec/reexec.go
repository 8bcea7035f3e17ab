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
	"os"
	"os/exec"
	"sync"
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
func Init() bool {
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
