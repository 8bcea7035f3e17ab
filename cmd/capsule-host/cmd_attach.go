package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	api "github.com/capsule-host/capsule-host/client"
	"golang.org/x/sys/unix"
)

func attachCommand() *command {
	return &command{
		name: "attach", args: "ID [--read-only] [--detach-keys KEYS]", summary: "attach this terminal to a terminal process", minArgs: 1, maxArgs: 1,
		help: `Shows a terminal process's screen and connects this terminal to it, as
docker attach does: keystrokes go to the process (raw mode: Ctrl-C is the
process's, not this command's), its output comes here, and this window's
size is the process's (resizes are forwarded). The detach keys (default
ctrl-p,ctrl-q) leave it running; so does closing this terminal. A later
attach shows the screen again. --read-only only watches: nothing typed
reaches the process and the window size is left alone. Ends when the
process exits.`,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.BoolVar(&o.term.readOnly, "read-only", false, "watch only: send no input and no window size")
			fs.StringVar(&o.term.detachKeys, "detach-keys", "ctrl-p,ctrl-q", "the key `sequence` that detaches (ctrl-X or single characters, comma-separated)")
		},
		run: runAttach,
	}
}

// parseDetachKeys turns "ctrl-p,ctrl-q" into its bytes.
func parseDetachKeys(s string) ([]byte, error) {
	var out []byte
	for _, k := range strings.Split(s, ",") {
		switch {
		case len(k) == 6 && strings.HasPrefix(strings.ToLower(k), "ctrl-"):
			c := k[5] | 0x20
			if c < 'a' || c > 'z' {
				if k[5] < '@' || k[5] > '_' {
					return nil, fmt.Errorf("detach key %q: ctrl- takes a letter or one of @[\\]^_", k)
				}
				c = k[5]
			}
			out = append(out, c&0x1f)
		case len(k) == 1:
			out = append(out, k[0])
		default:
			return nil, fmt.Errorf("detach key %q: want ctrl-X or a single character", k)
		}
	}
	return out, nil
}

// rawMode puts the terminal f in raw mode and returns the restore.
func rawMode(f *os.File) (func(), error) {
	fd := int(f.Fd())
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	old := *t
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, &old) }, nil
}

// drawScreen paints a snapshot on a fresh screen: clear, the rows, then
// the cursor where the program has it.
func drawScreen(w io.Writer, s api.Screen) {
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	b.WriteString(strings.Join(s.Lines, "\r\n"))
	fmt.Fprintf(&b, "\x1b[%d;%dH", s.CursorRow+1, s.CursorCol+1)
	if !s.CursorVisible {
		b.WriteString("\x1b[?25l")
	}
	_, _ = io.WriteString(w, b.String())
}

// errDetached ends an attach by the detach keys.
var errDetached = errors.New("detached")

func runAttach(e *env, o *opts, args []string) error {
	detach, err := parseDetachKeys(o.term.detachKeys)
	if err != nil {
		return usagef("--detach-keys: %v", err)
	}
	c, err := client(e)
	if err != nil {
		return err
	}
	p, err := c.Process(e.ctx, args[0])
	if err != nil {
		return err
	}
	id := p.ID
	in, _ := e.stdin.(*os.File)
	out, _ := e.stdout.(*os.File)
	if in != nil && isTerminal(in) {
		restore, err := rawMode(in)
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer restore()
	}
	ctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	if !o.term.readOnly && out != nil && isTerminal(out) {
		// The size first, before the screen is painted: what is typed
		// from then on runs at this window's size.
		sendSize(ctx, c, id, out)
		go forwardSize(ctx, c, id, out)
	}
	s, err := c.Screen(ctx, id, 0)
	if err != nil {
		return err
	}
	drawScreen(e.stdout, s)
	go attachInput(ctx, cancel, c, id, e.stdin, detach, o.term.readOnly)
	err = c.Follow(ctx, id, api.LogQuery{Cursor: s.Cursor}, func(ch api.LogChunk) error {
		_, werr := e.stdout.Write(ch.Data)
		return werr
	})
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errDetached):
		fmt.Fprintf(e.stdout, "\r\n[detached from %s; it keeps running: capsule-host attach %s]\r\n", p.LogID, id[:12])
		return nil
	case cause != nil && !errors.Is(cause, context.Canceled):
		return cause
	case err != nil:
		return err
	}
	if fin, ferr := c.Process(e.ctx, id); ferr == nil {
		fmt.Fprintf(e.stdout, "\r\n[process %s exited: %s]\r\n", p.LogID, api.ExitText(fin.Exit))
	}
	return nil
}

// sendSize sends this terminal's window size to the process.
func sendSize(ctx context.Context, c *api.Client, id string, out *os.File) {
	if ws, err := unix.IoctlGetWinsize(int(out.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
		_ = c.Resize(ctx, id, ws.Row, ws.Col)
	}
}

// forwardSize sends this terminal's size on every SIGWINCH.
func forwardSize(ctx context.Context, c *api.Client, id string, out *os.File) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			sendSize(ctx, c, id, out)
		}
	}
}

// attachInput forwards stdin to the process until the detach keys (the
// attach ends with errDetached), the end of stdin, or ctx. A detach-key
// prefix that turns out not to be the sequence is sent as typed, and
// what was typed before the detach keys is sent before detaching (one
// read may hold both: a paste, a fast typist, tmux send-keys).
func attachInput(ctx context.Context, cancel context.CancelCauseFunc, c *api.Client, id string, stdin io.Reader, detach []byte, readOnly bool) {
	buf := make([]byte, 4096)
	matched := 0
	for {
		n, err := stdin.Read(buf)
		send, detached := scanDetach(buf[:n], detach, &matched)
		if len(send) > 0 && !readOnly {
			if _, werr := c.Input(ctx, id, api.InputRequest{Data: send}); werr != nil && ctx.Err() == nil {
				cancel(fmt.Errorf("sending input: %w", werr))
				return
			}
		}
		if detached {
			cancel(errDetached)
			return
		}
		if err != nil {
			return // stdin ended: keep showing output until the process ends
		}
	}
}

// scanDetach splits one read into what to send and whether the detach
// keys completed in it (the bytes after them are dropped: attach ends).
// *matched carries a partial match of the keys across reads; a partial
// match that breaks is sent as typed, except its longest tail that
// starts the keys again (keys "a,a,d" typed "aaad" detach after one "a").
func scanDetach(in, detach []byte, matched *int) (send []byte, detached bool) {
	for _, b := range in {
		if b == detach[*matched] {
			if *matched++; *matched == len(detach) {
				return send, true
			}
			continue
		}
		typed := append(slices.Clip(detach[:*matched]), b)
		k := len(typed) - 1
		for k > 0 && !bytes.Equal(typed[len(typed)-k:], detach[:k]) {
			k--
		}
		send = append(send, typed[:len(typed)-k]...)
		*matched = k
	}
	return send, false
}
