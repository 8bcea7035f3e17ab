package local

import (
	"fmt"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Terminal processes (spec.Terminal): the child's fds 0, 1 and 2 are a
// PTY's slave, which becomes its controlling terminal (setsid, then
// TIOCSCTTY on fd 0: fork). The parent holds the master twice, as two
// descriptors of one open file: the pump's (read, the stdout log; closed
// by the pump when it ends) and stdin's (write; closed by Stdin.Close,
// at the latest when the process settles). Each is closed exactly once,
// by its one owner. Both are non-blocking and in the runtime poller, so
// reads and writes take deadlines like pipes: creack/pty's own ioctls
// call Fd(), which makes a file blocking for good, so the master it opens
// is only dup'd and closed. The master's read ends with EIO, not EOF,
// once every slave descriptor is closed: the pump stops on any error.

// setupTerminal opens the PTY at the spec's size and lays the slave on
// the child's fds 0, 1 and 2. s.errR stays nil: one stream.
func (p *proc) setupTerminal(s *spawn) error {
	s.undo.push(s.closeChild)
	m, tty, err := pty.Open()
	if err != nil {
		return fmt.Errorf("terminal: open pty: %w: %w", sandbox.ErrUnavailable, err)
	}
	defer m.Close()
	s.child = append(s.child, tty)
	t := p.spec.Terminal
	fd := int(m.Fd())
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: t.Rows, Col: t.Cols}); err != nil {
		return fmt.Errorf("terminal: set size: %w: %w", sandbox.ErrUnavailable, err)
	}
	if s.outR, err = sandbox.DupMaster(fd, "pty-master-read"); err != nil {
		return err
	}
	r := s.outR
	s.undo.push(func() { r.Close() })
	if s.stdinW, err = sandbox.DupMaster(fd, "pty-master-write"); err != nil {
		return err
	}
	w := s.stdinW
	s.undo.push(func() { w.Close() })
	p.master = r
	slave := tty.Fd()
	s.files = append(s.files, slave, slave, slave)
	return nil
}

// Resize implements sandbox.Resizer. Once the pump closed the master
// (every slave closed: the tree is gone) there is no terminal left.
func (p *proc) Resize(rows, cols uint16) error {
	return sandbox.ResizeMaster(p.master, p.ref.ID, rows, cols)
}

var _ sandbox.Resizer = (*proc)(nil)
