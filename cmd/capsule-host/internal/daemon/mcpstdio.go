package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/mcp"
)

// The stdio hand-off (client/stdio.go has the wire): `capsule-host mcp`
// gives the daemon its stdin and stdout over the socket, and the MCP
// session runs here, over the client's own pipes, next to the host. Each
// call then costs what a call of the HTTP API costs, not that plus a relay
// process that parses every message and makes an API call of it
// (RFC §19, the measured figures).

// handoffTimeout bounds the wait for the descriptors after the 101.
const handoffTimeout = 10 * time.Second

// stdioMaxState bounds the hand-off body (a session state to resume).
const stdioMaxState = 1 << 20

// errHandoff is the class of a hand-off that brought no usable stdio.
var errHandoff = errors.New("stdio hand-off")

// stdio takes over a handing process's stdin and stdout and serves one MCP
// session for principal on them until the session ends, the process goes
// away or the daemon stops.
func (e *mcpEndpoint) stdio(w http.ResponseWriter, r *http.Request, principal string) {
	if whoFrom(r).tcp {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, "the stdio hand-off passes file descriptors: on the unix socket only")
		return
	}
	if e.s.isDraining() {
		writeErr(w, http.StatusServiceUnavailable, api.CodeShuttingDown, "the daemon is shutting down")
		return
	}
	var state *sdk.ServerSessionState
	if !decodeBody(w, r, stdioMaxState, "stdio hand-off body", &state) {
		return
	}
	switch {
	case state != nil && state.InitializeParams == nil && state.InitializedParams == nil:
		state = nil // {}: a new session
	case state != nil && (state.InitializeParams == nil || state.InitializedParams == nil):
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, "a session state to resume holds the whole initialize handshake (initializeParams and initializedParams)")
		return
	}
	var uc *net.UnixConn
	if lc := connFrom(r); lc != nil {
		uc, _ = lc.Conn.(*net.UnixConn)
	}
	if uc == nil {
		writeErr(w, http.StatusBadRequest, api.CodeInvalidRequest, "the stdio hand-off needs a unix socket connection")
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeErr(w, http.StatusInternalServerError, api.CodeInternal, "taking over the connection: "+err.Error())
		return
	}
	defer conn.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.StdioUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	if brw.Reader.Buffered() > 0 {
		// The descriptors ride on a byte the client sends after the 101;
		// bytes before it would have carried them past us.
		e.s.log.Warn("MCP stdio hand-off refused: the client sent data before the 101")
		return
	}
	in, out, err := receiveStdio(uc)
	if err != nil {
		e.s.log.Warn("MCP stdio hand-off failed", "principal", principal, "err", err)
		return
	}
	defer in.Close()
	defer out.Close()
	e.serveStdio(&stdioPeer{conn: conn, br: brw.Reader}, in, out, principal, state)
}

// stdioPeer is the handing process's connection: control lines go out on
// it, and its end (the process died or was stopped) ends the session.
type stdioPeer struct {
	conn net.Conn
	br   *bufio.Reader
	mu   sync.Mutex
}

func (p *stdioPeer) send(c api.StdioControl) {
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.conn.SetWriteDeadline(time.Now().Add(handoffTimeout))
	_, _ = p.conn.Write(append(b, '\n'))
}

// serveStdio runs the session; see stdio.
func (e *mcpEndpoint) serveStdio(peer *stdioPeer, in, out *os.File, principal string, state *sdk.ServerSessionState) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := mcp.New(localDaemon{e.s}, mcp.Options{
		Principal: principal, Version: e.s.rt.Version, Log: e.s.log,
		OnState: func(_ *sdk.ServerSession, st sdk.ServerSessionState) {
			if b, err := json.Marshal(st); err == nil {
				peer.send(api.StdioControl{State: b})
			}
		},
	})
	if err != nil {
		e.s.log.Warn("MCP stdio session refused", "err", err)
		return
	}
	if err := srv.SyncTools(ctx); err != nil {
		e.s.log.Warn("MCP session without tools", "err", err)
	}
	e.mu.Lock()
	e.servers[srv] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.servers, srv)
		e.mu.Unlock()
	}()
	// The handing process sends nothing more: a read that ends is its end.
	go func() {
		_, _ = io.Copy(io.Discard, peer.br)
		cancel()
	}()
	e.s.log.Info("MCP stdio session handed over", "principal", principal, "resumed", state != nil)
	err = srv.Serve(ctx, mcp.FileTransport(in, out), state)
	switch {
	case ctx.Err() != nil:
		e.s.log.Info("MCP stdio session ended: the handing process went away", "principal", principal)
	case e.s.isDraining():
		// No End: the handing process gives the stdio to the next daemon.
		e.s.log.Info("MCP stdio session left for the next daemon", "principal", principal)
	default:
		end := "the client closed stdin"
		if err != nil && !errors.Is(err, io.EOF) {
			end = err.Error()
		}
		peer.send(api.StdioControl{End: end})
		e.s.log.Info("MCP stdio session ended", "principal", principal, "reason", end)
	}
}

// receiveStdio reads the byte that carries the handing process's stdin and
// stdout and returns them as pollable files (close-on-exec from the start:
// the net package receives with MSG_CMSG_CLOEXEC, so no process the daemon
// starts meanwhile inherits them). Exactly two descriptors, each
// a pipe or a socket; anything else is closed and refused.
func receiveStdio(uc *net.UnixConn) (in, out *os.File, err error) {
	_ = uc.SetReadDeadline(time.Now().Add(handoffTimeout))
	defer uc.SetReadDeadline(time.Time{})
	oob := make([]byte, syscall.CmsgSpace(4*4)) // room for more than two, to see them and close them
	var b [1]byte
	_, oobn, flags, _, err := uc.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading the descriptors: %w", errHandoff, err)
	}
	fds, err := parseRights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
	switch {
	case err != nil:
		closeAll()
		return nil, nil, err
	case flags&syscall.MSG_CTRUNC != 0 || len(fds) != 2:
		closeAll()
		return nil, nil, fmt.Errorf("%w: want stdin and stdout, got %d descriptors", errHandoff, len(fds))
	}
	for i, fd := range fds {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%w: %w", errHandoff, err)
		}
		if k := st.Mode & syscall.S_IFMT; k != syscall.S_IFIFO && k != syscall.S_IFSOCK {
			closeAll()
			return nil, nil, fmt.Errorf("%w: descriptor %d is not a pipe or a socket (mode %#o)", errHandoff, i, st.Mode)
		}
		// Non-blocking, so the files go through the runtime's poller and a
		// Close interrupts a read. The flag is on the open file description,
		// which only the handing process (which no longer uses it) shares.
		if err := syscall.SetNonblock(fd, true); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%w: %w", errHandoff, err)
		}
	}
	return os.NewFile(uintptr(fds[0]), "mcp-stdin"), os.NewFile(uintptr(fds[1]), "mcp-stdout"), nil
}

// parseRights returns every descriptor of the SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errHandoff, err)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("%w: %w", errHandoff, err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}
