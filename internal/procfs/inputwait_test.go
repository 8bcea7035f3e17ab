//go:build linux

package procfs

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestParseSyscall(t *testing.T) {
	nr, args, ok := ParseSyscall([]byte("270 0x1 0x7ffcae2db7b0 0x0 0x0 0x0 0x0 0x7ffcae2db720 0x7f072db1c954\n"))
	if !ok || nr != 270 || !slices.Equal(args, []uint64{1, 0x7ffcae2db7b0, 0, 0, 0, 0}) {
		t.Errorf("pselect6 line: %d %x %v", nr, args, ok)
	}
	for _, s := range []string{"running\n", "-1 0x7ffd 0x7f\n", "", "0 0xzz\n"} {
		if _, _, ok := ParseSyscall([]byte(s)); ok {
			t.Errorf("%q parsed as a blocked call", s)
		}
	}
}

// A real cat blocked on its stdin pipe is input-wait; a busy loop is not.
func TestInputWaitRealProcesses(t *testing.T) {
	cat := exec.Command("cat")
	w, err := cat.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	busy := exec.Command("sh", "-c", "while :; do :; done")
	for _, c := range []*exec.Cmd{cat, busy} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		w.Close()
		busy.Process.Kill()
		cat.Wait()
		busy.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := InputWait(cat.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cat blocked on its stdin never read as input-wait")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 20 {
		if ok, _ := InputWait(busy.Process.Pid); ok {
			t.Fatal("a busy loop read as input-wait")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A session leader waiting on its child, which reads the shared stdin
// (a shell running a prompt's program): the leader's session is
// input-wait through its process tree, a grandchild included.
func TestInputWaitSessionTree(t *testing.T) {
	leader := exec.Command("sh", "-c", "sh -c 'cat; true'; true")
	leader.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	w, err := leader.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		w.Close()
		leader.Wait()
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, err := InputWait(leader.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a session whose grandchild cat is blocked on stdin never read as input-wait")
		}
	}
}
