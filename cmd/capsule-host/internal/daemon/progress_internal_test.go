package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/client"
)

// While the daemon starts, health reports "loading" with the progress and
// each capsule's state, every other route fails with "loading N of M
// capsules", WaitReady waits within its bound, and the socket passes to
// the real server without being closed.
func TestServeLoading(t *testing.T) {
	sockPath := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenSocket(sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := &Progress{}
	p.begin([]string{"a", "b"}, true, true)
	p.set(client.CapsuleState{Name: "a", State: StateReady, Version: "1"}, true)
	p.set(client.CapsuleState{Name: "b", State: StateCompiling}, false)
	stop := ServeLoading(p, "test", slog.New(slog.DiscardHandler), l, nil)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	c := client.NewUnix(sockPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	h, err := c.Health(ctx)
	if err != nil || h.Status != "loading" || h.Ready || h.Loading == nil || *h.Loading != (client.LoadProgress{Done: 1, Total: 2}) {
		t.Fatalf("health while loading: %+v %v", h, err)
	}
	if len(h.CapsuleStates) != 2 || h.CapsuleStates[0].State != StateReady || h.CapsuleStates[1].State != StateCompiling {
		t.Fatalf("capsule states: %+v", h.CapsuleStates)
	}
	_, err = c.Call(ctx, client.CallRequest{Capsule: "a", Tool: "t"})
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Code != client.CodeLoading || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "loading 1 of 2 capsules") {
		t.Fatalf("call while loading: %v", err)
	}
	if _, err := c.WaitReady(ctx, 300*time.Millisecond); !errors.As(err, &ae) || ae.Code != client.CodeLoading || !strings.Contains(ae.Message, "still loading 1 of 2") {
		t.Fatalf("WaitReady past its bound: %v", err)
	}

	// The start finishes: the loading answerer hands the listener over.
	p.set(client.CapsuleState{Name: "b", State: StateReady}, true)
	p.setReady()
	stop()
	stopped = true
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ready, _, _, states := p.Snapshot()
		writeJSON(w, http.StatusOK, client.Health{Status: "ok", Ready: ready, CapsuleStates: states})
	})}
	go srv.Serve(l)
	defer srv.Close()
	h, err = c.WaitReady(ctx, 30*time.Second)
	if err != nil || !h.Ready || h.Status != "ok" || len(h.CapsuleStates) != 2 {
		t.Fatalf("WaitReady after the start: %+v %v", h, err)
	}
}

// WaitReady also waits for a daemon that is not listening yet, within
// its bound, and then says it is unreachable.
func TestWaitReadyUnreachable(t *testing.T) {
	c := client.NewUnix(filepath.Join(t.TempDir(), "none.sock"))
	_, err := c.WaitReady(context.Background(), 300*time.Millisecond)
	if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), "waited 300ms") {
		t.Fatalf("WaitReady on no daemon: %v", err)
	}
}

// The typed tool-error convention: exactly {"code","message"} with a
// kebab-case code; anything else is text.
func TestToolCode(t *testing.T) {
	for _, c := range []struct {
		in, code, msg string
		ok            bool
	}{
		{`{"code":"no-such-process","message":"gone"}`, "no-such-process", "gone", true},
		{`{"code":"Bad","message":"x"}`, "", "", false},
		{`{"code":"a","message":"x","extra":1}`, "", "", false},
		{`{"code":"a","message":"x"} trailing`, "", "", false},
		{`no-such-process: gone`, "", "", false},
		{`{"code":"","message":"x"}`, "", "", false},
	} {
		code, msg, ok := toolCode(c.in)
		if code != c.code || msg != c.msg || ok != c.ok {
			t.Errorf("toolCode(%q) = %q %q %v", c.in, code, msg, ok)
		}
	}
}
