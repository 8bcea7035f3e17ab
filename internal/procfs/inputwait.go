//go:build linux

package procfs

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// InputWait reports whether pid, or (when pid leads a session) any
// process of its session, is blocked reading its standard input. It
// reads, per process: /proc/<pid>/stat (state S, interruptible sleep),
// /proc/<pid>/wchan (the kernel function it sleeps in; "0" or empty is
// not blocked), /proc/<pid>/syscall (the system call and its arguments)
// and /proc/<pid>/fd/0 and fd/<n> (what descriptor the call waits on).
//
// A process waits for input when it sleeps in read, readv or pread64 on a
// descriptor naming the same file as its fd 0 (a pipe or terminal), or in
// select/pselect6 with nfds 1 (only fd 0 can be in the sets: what GNU
// readline does at bash's and python's prompts).
//
// Limits: poll, ppoll and epoll waits are not recognised (their fd lists
// are in the process's memory, which this does not read); a select over
// more descriptors than fd 0 is not input-wait; a process of another
// session (bwrap's --new-session child of a pipe run) is not seen; and the
// answer is a sample: it can change right after. Reading another user's
// syscall file needs ptrace access (the host runs as the processes'
// owner or root).
func InputWait(pid int) (bool, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return false, err
	}
	if blockedOnStdin(pid, st) {
		return true, nil
	}
	if st.SID != pid {
		return false, nil
	}
	members, err := sessionTree(pid)
	if err != nil {
		return false, err
	}
	for _, q := range members {
		if s, err := ReadStat(q); err == nil && s.SID == pid && blockedOnStdin(q, s) {
			return true, nil
		}
	}
	return false, nil
}

// sessionTree is where InputWait looks for pid's session: pid's
// descendants, through /proc/<pid>/task/<tid>/children (a read or two per
// process, bounded by maxTree). A session member whose parent exited was
// re-parented outside the tree (to the subreaper) and is not seen; a scan
// of every /proc/<pid>/stat, which would see it, costs a read per process
// on the host (2–3 ms per status call here, far more on a busy host), so
// it is only the fallback for a kernel without CONFIG_PROC_CHILDREN.
func sessionTree(pid int) ([]int, error) {
	queue, err := Children(pid)
	if err != nil {
		if _, serr := os.Stat("/proc/" + strconv.Itoa(pid)); serr != nil {
			return nil, serr // gone
		}
		return PIDs()
	}
	var out []int
	for len(queue) > 0 && len(out) < maxTree {
		q := queue[0]
		queue = queue[1:]
		out = append(out, q)
		more, _ := Children(q)
		queue = append(queue, more...)
	}
	return out, nil
}

// maxTree bounds sessionTree's walk.
const maxTree = 4096

// Children lists pid's children from every thread's children file; an
// error means the files are not there (the process is gone, or the kernel
// lacks CONFIG_PROC_CHILDREN).
func Children(pid int) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tids, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, t := range tids {
		b, err := os.ReadFile(dir + t.Name() + "/children")
		if err != nil {
			return nil, err
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// blockedOnStdin is InputWait's test for one process, whose stat is
// st; any read error (the process is gone, no access) is "not blocked".
func blockedOnStdin(pid int, st Stat) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	if st.State != 'S' {
		return false
	}
	w, err := os.ReadFile(dir + "wchan")
	if w = bytes.TrimSpace(w); err != nil || len(w) == 0 || string(w) == "0" {
		return false
	}
	b, err := os.ReadFile(dir + "syscall")
	if err != nil {
		return false
	}
	nr, args, ok := ParseSyscall(b)
	if !ok || len(args) < 1 {
		return false
	}
	switch {
	case isSelect(nr):
		return args[0] == 1
	case nr == syscall.SYS_READ || nr == syscall.SYS_READV || nr == syscall.SYS_PREAD64:
		return sameFile(dir, args[0])
	}
	return false
}

// sameFile reports whether descriptor fd of the process names the same
// open file as its fd 0.
func sameFile(dir string, fd uint64) bool {
	if fd == 0 {
		return true
	}
	in, err := os.Readlink(dir + "fd/0")
	if err != nil {
		return false
	}
	other, err := os.Readlink(dir + "fd/" + strconv.FormatUint(fd, 10))
	return err == nil && other == in
}

// ParseSyscall parses /proc/<pid>/syscall: the call number and its
// arguments while the process is blocked in a call; ok is false for
// "running", "-1 ..." (not in a call) or a malformed line.
func ParseSyscall(b []byte) (nr int, args []uint64, ok bool) {
	f := bytes.Fields(b)
	if len(f) < 1 {
		return 0, nil, false
	}
	n, err := strconv.Atoi(string(f[0]))
	if err != nil || n < 0 {
		return 0, nil, false
	}
	for _, a := range f[1:min(len(f), 7)] {
		v, err := strconv.ParseUint(string(bytes.TrimPrefix(a, []byte("0x"))), 16, 64)
		if err != nil {
			return 0, nil, false
		}
		args = append(args, v)
	}
	return n, args, true
}
