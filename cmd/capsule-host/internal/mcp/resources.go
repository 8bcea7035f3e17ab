package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	api "github.com/capsule-host/capsule-host/client"
)

// listResources answers resources/list from the daemon: three URIs per
// process of this principal. The list is never cached, so it is what the
// daemon holds now, whatever the client forgot.
func (s *Server) listResources(ctx context.Context) (*mcp.ListResourcesResult, error) {
	ps, err := s.mine(ctx, "")
	if err != nil {
		return nil, err
	}
	res := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	for _, p := range ps {
		name := p.Capsule + " " + p.Label
		if p.Label == "" {
			name = p.Capsule + " " + p.ID
		}
		res.Resources = append(res.Resources,
			&mcp.Resource{URI: ProcessURI(p.ID, "status"), Name: name + " status", MIMEType: "application/json",
				Description: fmt.Sprintf("%s (%s): %s", p.Command, p.Phase, api.ExitText(p.Exit))},
			&mcp.Resource{URI: ProcessURI(p.ID, "stdout"), Name: name + " stdout", MIMEType: "text/plain", Size: int64(p.BufferedBytes)},
			&mcp.Resource{URI: ProcessURI(p.ID, "stderr"), Name: name + " stderr", MIMEType: "text/plain"},
		)
	}
	return res, nil
}

// readResource reads one process resource. Another principal's process
// and an unknown one get the same resource-not-found.
func (s *Server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	ref, ok := parseProcessURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if ref.stream == "status" {
		p, err := s.own(ctx, ref.id)
		if err != nil {
			return nil, resourceErr(uri, err)
		}
		b, err := json.Marshal(view(p))
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
	}
	ch, err := s.read(ctx, readArgs{ID: ref.id, Stream: ref.stream, Cursor: ref.cursor, MaxBytes: ref.max})
	if err != nil {
		return nil, resourceErr(uri, err)
	}
	next := ProcessURI(ref.id, ref.stream) + "?cursor=" + url.QueryEscape(ch.Next)
	c := &mcp.ResourceContents{URI: uri, MIMEType: "text/plain",
		Meta: mcp.Meta{"next": ch.Next, "next_uri": next, "eof": ch.EOF, "bytes_dropped": ch.BytesDropped}}
	if len(ch.Data) > 0 && utf8.Valid(ch.Data) {
		c.Text = string(ch.Data)
	} else {
		// Empty or not UTF-8: a blob ("" for none), so the contents always
		// carry one of text or blob as the schema wants.
		c.MIMEType = "application/octet-stream"
		c.Blob = append([]byte{}, ch.Data...)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}, Meta: c.Meta}, nil
}

// resourceErr maps a daemon error on a resource: no such process is
// resource-not-found (the same as an unknown URI), the rest keep their
// code in the JSON-RPC error's data.
func resourceErr(uri string, err error) error {
	code := ErrorCode(err)
	if code == api.CodeNoSuchProcess {
		return mcp.ResourceNotFoundError(uri)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	data, _ := json.Marshal(map[string]string{"uri": uri, "code": code})
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: code + ": " + err.Error(), Data: data}
}

// notifyGap is the least time between two resources/updated for one
// subscription: a process printing a line per millisecond wakes its
// client at most every notifyGap (coalesced), and the last change is
// always told.
const notifyGap = 10 * time.Millisecond

// subscriptions holds the watchers of every session of one server.
type subscriptions struct {
	s  *Server
	mu sync.Mutex
	// by session, then URI.
	w map[*mcp.ServerSession]map[string]*watcher
	// byURI lists each URI's watchers, oldest first. Server.ResourceUpdated
	// reaches every session subscribed to the URI, so only the oldest
	// watcher sends: one per session and watcher sent N to each of N
	// sessions (TestTwoSessionsOneUpdate).
	byURI map[string][]*watcher
	// wg counts running watchers (closeAll waits for them).
	wg sync.WaitGroup
}

// watcher is one subscription's watch goroutine.
type watcher struct {
	cancel context.CancelFunc
	// live is closed once the SDK holds the subscription. The SDK calls
	// the subscribe handler first and records the session as a subscriber
	// only after it returned; Server.ResourceUpdated reaches recorded
	// sessions only, so a notification sent in between went to no one (the
	// first update was lost whenever output followed the subscribe at
	// once). The notifier waits for live before its first send.
	live chan struct{}
	once sync.Once
}

// confirm opens the watcher's gate: the SDK now holds the subscription.
func (w *watcher) confirm() { w.once.Do(func() { close(w.live) }) }

// liveTimeout bounds the wait for the SDK's confirmation, should a later
// SDK record subscriptions on a path the middlewares do not see: an update
// that is late but told beats one that never comes.
const liveTimeout = 5 * time.Second

func newSubscriptions(s *Server) *subscriptions {
	return &subscriptions{s: s, w: map[*mcp.ServerSession]map[string]*watcher{}, byURI: map[string][]*watcher{}}
}

// confirmed is told, by the middlewares, that the SDK recorded sess as a
// subscriber of uris: after a resources/subscribe answered without error,
// and when a subscriptions/listen stream is acknowledged (2026-07-28 and
// later, where the acknowledgement is what tells the client that its
// subscription is live).
func (ss *subscriptions) confirmed(sess *mcp.ServerSession, uris ...string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, u := range uris {
		if w := ss.w[sess][u]; w != nil {
			w.confirm()
		}
	}
}

// codeTooManySubscriptions is the code in the JSON-RPC error's data when
// a session is at its bound.
const codeTooManySubscriptions = "too-many-subscriptions"

func (ss *subscriptions) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	ref, ok := parseProcessURI(uri)
	if !ok || ref.cursor != "" || ref.max != 0 {
		return mcp.ResourceNotFoundError(uri)
	}
	// The bound first: a session at it gets the same answer for every URI
	// (its own process's, an unknown one, another principal's), without a
	// round trip to the daemon. Checked again below, under the lock that
	// adds the watcher.
	if dup, err := ss.room(req.Session, uri); dup || err != nil {
		return err
	}
	if _, err := ss.s.own(ctx, ref.id); err != nil {
		return resourceErr(uri, err)
	}
	// The starting cursor is taken before the answer, not in the watcher:
	// output written once the client holds its answer must be told, and a
	// watcher that looked for the tail later would take that output for
	// history (the cause of a lost first update under load).
	stream := ref.stream
	if stream == "status" {
		stream = "stdout"
	}
	cursor, err := ss.tail(ctx, ref.id, stream)
	if err != nil {
		return resourceErr(uri, err)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	m := ss.w[req.Session]
	if m == nil {
		m = map[string]*watcher{}
		ss.w[req.Session] = m
		go ss.reapOnClose(req.Session)
	}
	if dup, err := ss.roomLocked(req.Session, uri); dup || err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watcher{cancel: cancel, live: make(chan struct{})}
	m[uri] = w
	ss.byURI[uri] = append(ss.byURI[uri], w)
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		ss.watch(wctx, uri, ref, stream, cursor, w)
	}()
	return nil
}

// room says whether sess already holds uri (subscribing again is a no-op),
// or else whether it may hold one more subscription.
func (ss *subscriptions) room(sess *mcp.ServerSession, uri string) (dup bool, err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.roomLocked(sess, uri)
}

func (ss *subscriptions) roomLocked(sess *mcp.ServerSession, uri string) (dup bool, err error) {
	m := ss.w[sess]
	if _, dup := m[uri]; dup {
		return true, nil
	}
	if len(m) >= ss.s.o.MaxSubscriptions {
		data, _ := json.Marshal(map[string]any{"code": codeTooManySubscriptions, "max": ss.s.o.MaxSubscriptions})
		return false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Data: data,
			Message: fmt.Sprintf("%s: this session holds %d subscriptions, the most it may; unsubscribe from one first", codeTooManySubscriptions, len(m))}
	}
	return false, nil
}

func (ss *subscriptions) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if w, ok := ss.w[req.Session][req.Params.URI]; ok {
		ss.dropLocked(req.Params.URI, w)
		delete(ss.w[req.Session], req.Params.URI)
	}
	return nil
}

// reapOnClose ends a session's watchers when the session ends.
func (ss *subscriptions) reapOnClose(sess *mcp.ServerSession) {
	_ = sess.Wait()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for uri, w := range ss.w[sess] {
		ss.dropLocked(uri, w)
	}
	delete(ss.w, sess)
}

// dropLocked ends a watcher and takes it off its URI's list.
func (ss *subscriptions) dropLocked(uri string, w *watcher) {
	w.cancel()
	ss.byURI[uri] = slices.DeleteFunc(ss.byURI[uri], func(x *watcher) bool { return x == w })
	if len(ss.byURI[uri]) == 0 {
		delete(ss.byURI, uri)
	}
}

// leads reports whether w is the oldest watcher of uri, the one that sends.
func (ss *subscriptions) leads(uri string, w *watcher) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.byURI[uri]
	return len(l) > 0 && l[0] == w
}

// closeAll ends every watcher and waits for them.
func (ss *subscriptions) closeAll() {
	ss.mu.Lock()
	for sess, m := range ss.w {
		for uri, w := range m {
			ss.dropLocked(uri, w)
		}
		delete(ss.w, sess)
	}
	ss.mu.Unlock()
	ss.wg.Wait()
}

// watch tells the subscribers of uri when it changes, from cursor on: for
// a stream, each time the daemon's follow stream brings new bytes and once
// at its end;
// for status, when stdout ends (the process exited). The daemon pushes
// chunks on its follow stream; nothing here polls.
func (ss *subscriptions) watch(ctx context.Context, uri string, ref procRef, stream, cursor string, w *watcher) {
	dirty := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ss.notifier(ctx, uri, dirty, w)
	}()
	mark := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	err := ss.s.d.Follow(ctx, ref.id, api.LogQuery{Stream: stream, Cursor: cursor}, func(ch api.LogChunk) error {
		if ref.stream != "status" && (len(ch.Data) > 0 || ch.BytesDropped > 0) {
			mark()
		}
		if ch.EOF {
			mark()
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		ss.s.log.Debug("a subscription's follow stream ended", "uri", uri, "err", err)
		mark() // the process is gone or the daemon is: worth a re-read
	}
	close(dirty)
	<-done
}

// tail returns the cursor after the last retained byte of a stream, so a
// new subscription is told of output that comes after it, not before.
func (ss *subscriptions) tail(ctx context.Context, id, stream string) (string, error) {
	cursor := ""
	for {
		ch, err := ss.s.d.Logs(ctx, id, api.LogQuery{Stream: stream, Cursor: cursor, Max: 1 << 20})
		if err != nil {
			return "", err
		}
		if ch.Next != "" {
			cursor = ch.Next
		}
		if len(ch.Data) == 0 {
			return cursor, nil
		}
	}
}

// notifier sends resources/updated for each mark on dirty, at most one per
// notifyGap: marks that arrive in between fold into one notification. It
// starts sending once live is closed (see watcher.live); a mark made before
// waits in dirty.
func (ss *subscriptions) notifier(ctx context.Context, uri string, dirty <-chan struct{}, w *watcher) {
	live := w.live
	t := time.NewTimer(liveTimeout)
	select {
	case <-live:
	case <-ctx.Done():
		t.Stop()
		return
	case <-t.C:
		ss.s.log.Warn("the MCP SDK did not confirm a subscription; notifying anyway", "uri", uri)
	}
	t.Stop()
	for range dirty {
		if !ss.leads(uri, w) {
			continue // the oldest watcher of uri tells every session
		}
		if err := ss.s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
			return
		}
		t := time.NewTimer(notifyGap)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
