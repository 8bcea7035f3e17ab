package reexec

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func init() {
	Register("reexec-test-echo", func(args []string) int {
		os.Stdout.WriteString(strings.Join(args, ","))
		return 7
	})
}

func init() {
	// Reports whether fd args[0] is open here (it must be: sealing keeps
	// it usable) and in a child of this process (it must not be).
	Register("reexec-test-fds", func(args []string) int {
		fd, _ := strconv.Atoi(args[0])
		_, here := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		out, err := exec.Command("/bin/sh", "-c", "if [ -e /proc/self/fd/"+args[0]+" ]; then echo leaked; else echo sealed; fi").Output()
		if err != nil {
			return 3
		}
		fmt.Printf("here=%v child=%s", here == nil, strings.TrimSpace(string(out)))
		return 0
	})
}

func TestMain(m *testing.M) {
	if Init() {
		return
	}
	os.Exit(m.Run())
}

func TestCommandRunsRole(t *testing.T) {
	out, err := Command("reexec-test-echo", "a", "b").Output()
	if string(out) != "a,b" {
		t.Fatalf("output %q, want a,b", out)
	}
	ee, ok := err.(interface{ ExitCode() int })
	if !ok || ee.ExitCode() != 7 {
		t.Fatalf("err = %v, want exit 7", err)
	}
	if !Registered("reexec-test-echo") || Registered("nope") {
		t.Fatal("Registered is wrong")
	}
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	Register("reexec-test-echo", func([]string) int { return 0 })
}

// TestSealInherited: a descriptor the launcher left without close-on-exec
// (as a CI runner's pipe is) stays usable in the helper but never reaches
// the helper's children.
func TestSealInherited(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], 0); err != nil { // no O_CLOEXEC, on purpose
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	// The kernel passes the non-close-on-exec write end to the helper at
	// the same number, as it would from any launcher.
	out, err := Command("reexec-test-fds", strconv.Itoa(p[1])).Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	if got := string(out); got != "here=true child=sealed" {
		t.Fatalf("got %q, want the descriptor open in the helper and absent from its child", got)
	}
}
