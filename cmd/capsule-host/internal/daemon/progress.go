package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// Capsule states in health (api.CapsuleState.State).
const (
	StatePending   = "pending"   // configured, not compiled yet (start only)
	StateCompiling = "compiling" // being compiled and instantiated
	StateReady     = "ready"     // serving
	StateFailed    = "failed"    // its last load failed (Serving: the version kept)
)

// Progress is the daemon's readiness: while Open compiles the capsules
// (4-8 s on a cold start) the loading server (ServeLoading) answers
// health with it and every other route with a loading error, so a client
// gets "loading N of M capsules" instead of a silent hang. After the start
// it keeps each capsule's state, which health reports. Safe for
// concurrent use; the zero value is ready to use.
type Progress struct {
	mu     sync.Mutex
	ready  bool
	total  int
	done   int
	states map[string]api.CapsuleState // by capsule name (or directory when unnamed)
}

// begin starts a reconcile of names (the start's, when starting); a full
// one forgets the unreadable directories of the last (they are recorded
// again if still unreadable).
func (p *Progress) begin(names []string, starting, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.states == nil {
		p.states = map[string]api.CapsuleState{}
	}
	if full {
		for k, s := range p.states {
			if s.Name == "" {
				delete(p.states, k)
			}
		}
	}
	if starting {
		p.total, p.done = len(names), 0
		for _, n := range names {
			p.states[n] = api.CapsuleState{Name: n, State: StatePending}
		}
	}
}

// set records the state of one capsule; a start's finished capsule
// counts towards done.
func (p *Progress) set(s api.CapsuleState, finished bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.states == nil {
		p.states = map[string]api.CapsuleState{}
	}
	key := s.Name
	if key == "" {
		key = s.Dir
	}
	p.states[key] = s
	if finished && !p.ready {
		p.done++
	}
}

// drop forgets a removed capsule.
func (p *Progress) drop(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.states, name)
}

// setReady marks the start as finished: the API serves.
func (p *Progress) setReady() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = true
}

// Snapshot is the readiness for health: whether the start finished, the
// start's counts, and every capsule's state sorted by name.
func (p *Progress) Snapshot() (ready bool, done, total int, states []api.CapsuleState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	states = make([]api.CapsuleState, 0, len(p.states))
	for _, s := range p.states {
		states = append(states, s)
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Name+states[i].Dir < states[j].Name+states[j].Dir })
	return p.ready, p.done, p.total, states
}

// loadingText is the loading error's message.
func loadingText(done, total int) string {
	return fmt.Sprintf("loading %d of %d capsules; retry when GET /v1/health says ready, or pass --wait DURATION", done, total)
}

// ServeLoading answers on sock (and tcp, if not nil) while the daemon
// starts: GET /v1/health with status "loading" and the progress, every
// other request 503 loading ("loading N of M capsules"). Each answer
// closes its connection. stop ends it and hands the listeners back,
// still open, for Serve.
func ServeLoading(p *Progress, version string, lg *slog.Logger, sock, tcp net.Listener) (stop func()) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, done, total, states := p.Snapshot()
		if r.Method == http.MethodGet && r.URL.Path == "/v1/health" && r.Header.Get("Authorization") == "" {
			writeJSON(w, http.StatusOK, api.Health{Status: "loading", Version: version, Contracts: contracts(),
				Loading: &api.LoadProgress{Done: done, Total: total}, CapsuleStates: states})
			return
		}
		writeErr(w, http.StatusServiceUnavailable, api.CodeLoading, loadingText(done, total))
	})
	var wg sync.WaitGroup
	var servers []*http.Server
	var lns []*pausedListener
	for _, l := range []net.Listener{sock, tcp} {
		if l == nil {
			continue
		}
		pl := &pausedListener{Listener: l}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		servers, lns = append(servers, srv), append(lns, pl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(pl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				lg.Warn("the loading answerer stopped", "err", err)
			}
		}()
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			_ = srv.Shutdown(ctx)
		}
		wg.Wait()
		for _, pl := range lns {
			pl.resume()
		}
	}
}

// deadliner is what net.UnixListener and net.TCPListener offer to
// interrupt a blocked Accept without closing the socket.
type deadliner interface{ SetDeadline(time.Time) error }

// pausedListener lends a listener to the loading server: its Close
// interrupts Accept with a deadline instead of closing the socket, so the
// socket (and its path) stay for Serve and no connection is refused in
// between (the kernel queues them).
type pausedListener struct {
	net.Listener
	mu     sync.Mutex
	closed bool
}

func (l *pausedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed && c == nil {
		return nil, net.ErrClosed
	}
	// A connection accepted as the pause began is still answered (the
	// server's Shutdown waits for it).
	return c, err
}

func (l *pausedListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	if d, ok := l.Listener.(deadliner); ok {
		return d.SetDeadline(time.Now())
	}
	return nil
}

// resume clears the deadline Close set.
func (l *pausedListener) resume() {
	if d, ok := l.Listener.(deadliner); ok {
		_ = d.SetDeadline(time.Time{})
	}
}
