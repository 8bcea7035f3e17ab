package daemon

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/registry/etcddir"
)

// The node-to-node channel: each node answers POST /v1/peer/call on
// [cluster] listen for calls the other nodes forward, authenticated by
// the cluster's pinned token (derived from the shared key file; mutual
// TLS from an operator CA is the planned upgrade). The holder re-checks
// the caller's (capsule, principal) by running the call through its own
// registry as that caller.

const (
	peerPath = "/v1/peer/call"
	// peerProcessesPath answers the operator's cluster-wide `ps`: the
	// node's OperatorList for a filter (the token is the operator's trust
	// between nodes).
	peerProcessesPath = "/v1/peer/processes"
	peerNodeHdr       = "X-Capsule-Node"
	peerBodyMax       = 8 << 20 // a stdin write (1 MiB by default) in JSON, with room
	peerDialBound     = 3 * time.Second
)

// peerAnswer is the holder's answer: a result or a registry error.
type peerAnswer struct {
	Result json.RawMessage       `json:"result,omitempty"`
	Error  *registry.RemoteError `json:"error,omitempty"`
}

// peers is the forwarding client (registry.Forwarder) and the server.
type peers struct {
	dir    *etcddir.Dir
	token  string
	node   string
	client *http.Client
	ln     net.Listener
	srv    *http.Server

	mu    sync.Mutex
	addrs map[string]string // node → address, dropped when a call to it fails

	tls *peerTLS // nil: plain HTTP (cluster_tls.go)
}

func newPeers(dir *etcddir.Dir, token, listen string, pt *peerTLS) (*peers, error) {
	p := &peers{dir: dir, token: token, node: dir.Node(), addrs: map[string]string{}, tls: pt}
	tr := &http.Transport{DialContext: (&net.Dialer{Timeout: peerDialBound}).DialContext, MaxIdleConnsPerHost: 16}
	if pt != nil {
		// The node a request is for is its URL's host (a name, see url);
		// the dialer connects to that node's address from the directory.
		tr.DialTLSContext = p.dialTLS
	}
	p.client = &http.Client{Transport: tr}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("cluster listener %s: %w", listen, err)
	}
	p.ln = ln
	return p, nil
}

// dialTLS reaches the node named by addr's host over mutual TLS,
// checking that its certificate names it.
func (p *peers) dialTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	b, err := hex.DecodeString(strings.ReplaceAll(host, ".", ""))
	if err != nil {
		return nil, fmt.Errorf("%w: peer host %q: %v", registry.ErrInternal, host, err)
	}
	node := string(b)
	real, err := p.address(ctx, node)
	if err != nil {
		return nil, err
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: peerDialBound}, Config: p.tls.clientFor(node)}
	return d.DialContext(ctx, "tcp", real)
}

// nodeHost spells a node name as a URL host (hex, in labels of at most
// 62 characters): any name, and one connection pool per node.
func nodeHost(node string) string {
	h := hex.EncodeToString([]byte(node))
	var labels []string
	for len(h) > 62 {
		labels, h = append(labels, h[:62]), h[62:]
	}
	return strings.Join(append(labels, h), ".")
}

// url is where a call to node goes: with TLS the node's name (the dialer
// resolves it through the directory and checks the certificate names
// it), else its address.
func (p *peers) url(ctx context.Context, node, path string) (string, error) {
	if p.tls != nil {
		return "https://" + nodeHost(node) + ":0" + path, nil
	}
	addr, err := p.address(ctx, node)
	if err != nil {
		return "", err
	}
	return "http://" + addr + path, nil
}

// address is node's address, from the directory once, then cached (a
// node re-registering elsewhere fails one call, which drops the entry).
func (p *peers) address(ctx context.Context, node string) (string, error) {
	p.mu.Lock()
	a, ok := p.addrs[node]
	p.mu.Unlock()
	if ok {
		return a, nil
	}
	a, err := p.dir.NodeAddress(ctx, node)
	if err == nil {
		p.mu.Lock()
		p.addrs[node] = a
		p.mu.Unlock()
	}
	return a, err
}

func (p *peers) forget(node string) {
	p.mu.Lock()
	delete(p.addrs, node)
	p.mu.Unlock()
}

// Forward sends call to node; any failure to reach it is unavailable
// naming the node (its processes are not "no such process": they exist).
func (p *peers) Forward(ctx context.Context, node string, call registry.RemoteCall) (json.RawMessage, error) {
	var a peerAnswer
	if err := p.post(ctx, node, peerPath, call, &a); err != nil {
		return nil, err
	}
	if a.Error != nil {
		return nil, registry.DecodeRemoteError(*a.Error, node)
	}
	return a.Result, nil
}

// post sends body to node's path and decodes its answer into out.
func (p *peers) post(ctx context.Context, node, path string, body, out any) error {
	u, err := p.url(ctx, node, path)
	if err != nil {
		return err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%w: encoding a forwarded call: %v", registry.ErrInternal, err)
	}
	tctx, sent := registry.TraceSent(ctx)
	req, err := http.NewRequestWithContext(tctx, "POST", u, bytes.NewReader(b))
	if err != nil {
		p.forget(node)
		return fmt.Errorf("%w: node %q at %q: %v", registry.ErrUnavailable, node, u, err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set(peerNodeHdr, p.node)
	resp, err := p.client.Do(req)
	if err != nil {
		p.forget(node)
		if ctx.Err() != nil {
			return fmt.Errorf("%w: forwarding to node %q: %v", registry.ErrCancelled, node, ctx.Err())
		}
		if sent() {
			return &registry.AnswerLostError{Node: node, Cause: err}
		}
		return &registry.HeldElsewhereError{Node: node}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.forget(node)
		return fmt.Errorf("%w: node %q refused the forwarded call: HTTP %d", registry.ErrUnavailable, node, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, peerBodyMax)).Decode(out); err != nil {
		return &registry.AnswerLostError{Node: node, Cause: err}
	}
	return nil
}

// listAll is the operator's list of node's processes (GET /v1/processes
// across the cluster).
func (p *peers) listAll(ctx context.Context, node string, f registry.OperatorFilter) ([]registry.Info, error) {
	var out []registry.Info
	return out, p.post(ctx, node, peerProcessesPath, f, &out)
}

// serve answers forwarded calls with reg until stop.
func (p *peers) serve(reg *registry.Registry, lg *slog.Logger) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || (r.URL.Path != peerPath && r.URL.Path != peerProcessesPath) {
			http.NotFound(w, r)
			return
		}
		tok, _ := bytes.CutPrefix([]byte(r.Header.Get("Authorization")), []byte("Bearer "))
		if !peerNamed(r.TLS, r.Header.Get(peerNodeHdr)) {
			lg.Warn("cluster: refused a node-to-node call whose certificate does not name the node it claims", "remote", r.RemoteAddr, "claims_node", r.Header.Get(peerNodeHdr))
			http.Error(w, "certificate does not name the calling node", http.StatusUnauthorized)
			return
		}
		if subtle.ConstantTimeCompare(tok, []byte(p.token)) != 1 {
			lg.Warn("cluster: refused a node-to-node call with a wrong token", "remote", r.RemoteAddr, "claims_node", r.Header.Get(peerNodeHdr))
			http.Error(w, "wrong cluster token", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == peerProcessesPath {
			var f registry.OperatorFilter
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&f); err != nil {
				http.Error(w, "bad filter", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(reg.OperatorList(f))
			lg.Info(auditMsg, "from", r.Header.Get(peerNodeHdr), "op", "operator-list", "result", "ok")
			return
		}
		var call registry.RemoteCall
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, peerBodyMax)).Decode(&call); err != nil {
			http.Error(w, "bad forwarded call", http.StatusBadRequest)
			return
		}
		call.From = r.Header.Get(peerNodeHdr) // the token (and with mTLS the certificate) vouched for it
		start := time.Now()
		res, err := reg.ServeRemote(r.Context(), call)
		audit(lg, reg, call, res, err, time.Since(start))
		a := peerAnswer{Result: res}
		if err != nil {
			e := registry.EncodeRemoteError(err)
			a = peerAnswer{Error: &e}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a)
	})
	p.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	ln := p.ln
	if p.tls != nil {
		p.srv.TLSConfig = p.tls.server
		ln = tls.NewListener(p.ln, p.tls.server)
	}
	go func() {
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			lg.Warn("cluster listener failed", "err", err)
		}
	}()
}

// auditMsg starts the audit line of every forwarded call this node
// served (refused ones are Warn lines of their own).
const auditMsg = "cluster audit: forwarded call served"

// audit logs one forwarded call: which node sent it, for which caller,
// what it did to which process (its log ID, never the ID; for a placed
// spawn the one it started), the outcome's
// error class and how long it took. One Info line per call, so an
// operator can answer "who touched this process from where" from the
// holder's log alone.
func audit(lg *slog.Logger, reg *registry.Registry, call registry.RemoteCall, res json.RawMessage, err error, took time.Duration) {
	attrs := []any{"from", call.From, "op", call.Op, "capsule", call.Caller.Capsule, "principal", call.Caller.Principal}
	id := call.ID
	if call.Op == registry.OpSpawnPersistent && err == nil {
		_ = json.Unmarshal(res, &id) // a placed spawn: the process it started
	}
	if id != "" {
		attrs = append(attrs, "proc", reg.LogID(id))
	}
	result := "ok"
	if err != nil {
		result = registry.EncodeRemoteError(err).Class
	}
	lg.Info(auditMsg, append(attrs, "result", result, "took", took)...)
}

// stop closes the listener and waits (bounded by ctx) for forwarded calls
// in flight.
func (p *peers) stop(ctx context.Context) {
	if p.srv == nil {
		p.ln.Close()
		return
	}
	if err := p.srv.Shutdown(ctx); err != nil {
		p.srv.Close()
	}
	p.client.CloseIdleConnections()
}
