package sandbox

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// The PTY master's handling that every backend with terminals shares
// (local makes the PTY itself; OCI receives the runtime's over its
// console socket): the descriptors it is used through, TERM, resize.

// DupMaster returns a non-blocking, close-on-exec descriptor of the
// master as a pollable *os.File (os.NewFile polls a non-blocking fd), so
// that the pump and stdin's writes each close their own.
func DupMaster(fd int, name string) (*os.File, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("terminal: dup master: %w: %w", ErrUnavailable, err)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("terminal: master non-blocking: %w: %w", ErrUnavailable, err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// WithTerm is env with TERM set to term, replacing any TERM in it: it
// must name what the screen model emulates.
func WithTerm(env []string, term string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TERM=") {
			out = append(out, kv)
		}
	}
	return append(out, "TERM="+term)
}

// ResizeMaster is a Resizer's work: TIOCSWINSZ on master (the kernel
// sends SIGWINCH to the terminal's foreground group). A nil master (no
// terminal) or one the pump already closed (the process is gone) is
// ErrNoTerminal; id names the process in the error.
func ResizeMaster(master *os.File, id string, rows, cols uint16) error {
	if master == nil {
		return fmt.Errorf("resize %s: %w", id, ErrNoTerminal)
	}
	if err := CheckTerminalSize(rows, cols); err != nil {
		return err
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize %s: %w: %w", id, ErrNoTerminal, err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return fmt.Errorf("resize %s: terminal closed: %w", id, ErrNoTerminal)
	}
	if ierr != nil {
		return fmt.Errorf("resize %s: %w: %w", id, ErrUnavailable, ierr)
	}
	return nil
}
