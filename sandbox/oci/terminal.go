package oci

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/sandbox"
)

// Terminal containers (spec.Terminal): config.json asks for
// `process.terminal` at the spec's size, and the monitor runs `runc run
// --detach --console-socket PATH`. The runtime makes the PTY inside the
// container (its own devpts instance), gives the slave to the container's
// pid 1 as stdio and controlling terminal, and sends the master over the
// console socket with SCM_RIGHTS. The backend (in a daemon with
// durability: the keeper) listens on that socket and keeps the master,
// exactly like the local backend's own PTY: one descriptor for the pump
// (stdout's log; read ends with EIO once every slave is closed, that is,
// once the container is empty), one for stdin's writes, both non-blocking
// in the runtime poller. The monitor's stdio pipes carry nothing then and
// are closed. stderr's log is empty and closed at once, as for local
// terminals. A resize is TIOCSWINSZ on the master; the kernel sends
// SIGWINCH to the terminal's foreground group (capsule-oci-init hands the
// foreground to its child, see init/capsule-oci-init.c).

// consoleAccept bounds the wait for the runtime's master once `run`
// said the container runs: runc sends it before it starts the process.
const consoleAccept = 10 * time.Second

// console is the listening console socket of one terminal start, in a
// private (0700) directory of its own: a path short enough for a unix
// socket (108 bytes) whatever the backend root, that no other user can
// connect to.
type console struct {
	dir string
	ln  *net.UnixListener
}

func listenConsole() (*console, error) {
	dir, err := os.MkdirTemp("", "capsule-console-")
	if err != nil {
		return nil, fmt.Errorf("oci terminal: %w: %w", sandbox.ErrUnavailable, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("oci terminal: console socket: %w: %w", sandbox.ErrUnavailable, err)
	}
	return &console{dir: dir, ln: ln}, nil
}

func (c *console) path() string { return filepath.Join(c.dir, "s") }

func (c *console) close() {
	c.ln.Close()
	os.RemoveAll(c.dir)
}

// receive accepts the runtime's connection and takes the one descriptor
// it sends (SCM_RIGHTS), bounded by ctx and consoleAccept.
func (c *console) receive(ctx context.Context) (int, error) {
	deadline := time.Now().Add(consoleAccept)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.ln.SetDeadline(deadline)
	conn, err := c.ln.AcceptUnix()
	if err != nil {
		return -1, fmt.Errorf("oci terminal: no console from the runtime: %w: %w", sandbox.ErrUnavailable, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	buf := make([]byte, 256) // runc sends the pty's name as data
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, fmt.Errorf("oci terminal: console message: %w: %w", sandbox.ErrUnavailable, err)
	}
	return masterFrom(oob[:oobn])
}

// masterFrom is the one descriptor of a control message; any extra one
// (a misbehaving runtime) is closed.
func masterFrom(oob []byte) (int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1, fmt.Errorf("oci terminal: console control message: %w: %w", sandbox.ErrUnavailable, err)
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) == 0 {
		return -1, fmt.Errorf("oci terminal: the runtime sent no descriptor: %w", sandbox.ErrUnavailable)
	}
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	unix.CloseOnExec(fds[0])
	return fds[0], nil
}

// terminalFiles turns the received master into the pump's and stdin's
// descriptors (each closed by its one owner) at the spec's size, and
// closes the received one.
func terminalFiles(fd int, t *sandbox.TerminalSpec) (r, w *os.File, err error) {
	defer unix.Close(fd)
	// runc applies consoleSize itself; set it again in case a runtime
	// does not (a no-op when the size is already right: no SIGWINCH).
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: t.Rows, Col: t.Cols}); err != nil {
		return nil, nil, fmt.Errorf("oci terminal: set size: %w: %w", sandbox.ErrUnavailable, err)
	}
	if r, err = sandbox.DupMaster(fd, "pty-master-read"); err != nil {
		return nil, nil, err
	}
	if w, err = sandbox.DupMaster(fd, "pty-master-write"); err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, w, nil
}

// addTerminal asks the runtime for a terminal of the spec's size, with
// TERM set (replacing the spec's or the profile's: it must name what the
// screen model emulates).
func addTerminal(s *specs.Spec, t *sandbox.TerminalSpec) {
	if t == nil {
		return
	}
	s.Process.Terminal = true
	s.Process.ConsoleSize = &specs.Box{Height: uint(t.Rows), Width: uint(t.Cols)}
	s.Process.Env = sandbox.WithTerm(s.Process.Env, t.Term)
}

// startTerminal is Start's terminal path after the monitor said the
// container runs: take the master from the console socket and wire it as
// the container's stdin and stdout.
func (c *container) startTerminal(ctx context.Context, cons *console, mon *monitorProc, t *sandbox.TerminalSpec, status *statusLines) error {
	fd, err := cons.receive(ctx)
	var r, w *os.File
	if err == nil {
		r, w, err = terminalFiles(fd, t)
	}
	if err != nil {
		// The container runs: end it, so that the monitor (which Start's
		// undo waits for) records the exit and goes.
		_ = c.st.runtime().kill(context.Background(), c.st.ContainerID, unix.SIGKILL, true)
		return err
	}
	// The monitor's stdio pipes reach nothing in a terminal container.
	for _, f := range []*os.File{mon.stdinW, mon.outR, mon.errR} {
		if f != nil {
			f.Close()
		}
	}
	mon.stdinW, mon.outR, mon.errR = w, r, nil
	c.master = r
	c.wire(sandbox.StdinSpec{Mode: sandbox.StdinOpen}, mon, status)
	return nil
}

// Resize implements sandbox.Resizer. Once the pump closed the master
// (the container is empty) there is nothing to resize.
func (h *handle) Resize(rows, cols uint16) error {
	return sandbox.ResizeMaster(h.c.master, h.c.id, rows, cols)
}

var _ sandbox.Resizer = (*handle)(nil)
