package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ListenSocket opens the API's unix socket with mode 0600 in a directory
// created 0700. A stale socket (no daemon answers) is replaced; a live one
// is an error, so two daemons never fight over one path.
func ListenSocket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the socket directory: %w", err)
	}
	if _, err := os.Lstat(path); err == nil {
		c, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			c.Close()
			return nil, fmt.Errorf("another capsule-host daemon is serving on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	// The umask makes the socket 0600 from birth: no window in which
	// another user could connect before a chmod.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	return l, nil
}

// Serve answers the API on sock (and tcp, if not nil) until ctx ends, then
// shuts down gracefully:
//
//  1. stop accepting; new calls on open connections get shutting-down;
//     follow streams end;
//  2. in-flight calls get grace to finish, then their contexts are
//     cancelled (the host interrupts the guest);
//  3. the runtime closes: persistent processes are stopped and logged.
//
// While serving, each SIGHUP on Options.Hangup reloads the capsules
// (Runtime.Reload). The socket file is removed. Serve returns the first listener error, or
// nil after a clean shutdown.
func Serve(ctx context.Context, rt *Runtime, sock, tcp net.Listener, grace time.Duration) error {
	s := NewServer(rt)
	baseCtx, cancelCalls := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelCalls()
	servers := []*http.Server{newHTTPServer(s.Handler(), baseCtx)}
	lns := []net.Listener{limitConns(sock)}
	if tcp != nil {
		servers = append(servers, newHTTPServer(s.TCPHandler(), baseCtx))
		lns = append(lns, limitConns(tcp))
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(lns[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	attrs := []any{"socket", sock.Addr().String(), "engine", rt.Engine, "capsules", len(rt.Host.Capsules()), "capsules_failed", len(rt.Failures())}
	if tcp != nil {
		attrs = append(attrs, "tcp", tcp.Addr().String())
	}
	rt.Log.Info("capsule-host serving", attrs...)
	stopHangup := rt.watchHangup()
	stopWatch := rt.watch()

	var serveErr error
	select {
	case <-ctx.Done():
		rt.Log.Info("shutting down", "cause", context.Cause(ctx), "in_flight_grace", grace)
	case serveErr = <-errc:
		rt.Log.Error("listener failed; shutting down", "err", serveErr)
	}
	stopWatch()
	stopHangup()
	s.beginDrain()

	sctx, cancel := context.WithTimeout(context.Background(), grace)
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Shutdown(sctx); err != nil {
				// Grace is over: cancel what still runs, then close.
				rt.Log.Warn("in-flight calls outlived the shutdown grace; cancelling them", "grace", grace)
				cancelCalls()
				_ = srv.Close()
			}
		}()
	}
	wg.Wait()
	// A server whose Serve goroutine had not started yet when Shutdown ran
	// never saw its listener: close them all here (idempotent), which also
	// unlinks the socket file.
	for _, l := range lns {
		_ = l.Close()
	}
	cancel()
	cancelCalls()
	rt.Log.Info("API closed; no calls in flight")

	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer ccancel()
	if err := rt.Close(cctx); err != nil && serveErr == nil {
		serveErr = err
	}
	rt.Log.Info("capsule-host stopped")
	return serveErr
}

// idleTimeout closes a keep-alive connection that sends no new request:
// without it (http.Server's zero value) any local user who can reach the
// loopback listener could hold idle connections, and their descriptors,
// forever without ever authenticating. A var so a test can shorten it.
var idleTimeout = 2 * time.Minute

// newHTTPServer is the server for one listener. No ReadTimeout or
// WriteTimeout: a call runs up to its own deadline and `logs -f` streams
// for as long as the client stays, and net/http cancels a request's
// context when its connection's read deadline passes; bodies get their
// own deadline instead (guard, readBodies).
func newHTTPServer(h http.Handler, base context.Context) *http.Server {
	return &http.Server{
		Handler:           h,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext:       connContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}
