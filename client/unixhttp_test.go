package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveUnix serves h on a unix socket in a temporary directory.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// The hand-written transport frames what net/http's server sends: a
// Content-Length body, a chunked stream of flushed lines, an error answer,
// and a body-less 204.
func TestUnixTransportFraming(t *testing.T) {
	var gotBody, gotType, gotAuth string
	sock := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/health":
			b, _ := io.ReadAll(r.Body)
			gotBody, gotType, gotAuth = string(b), r.Header.Get("Content-Type"), r.Header.Get("Authorization")
			io.WriteString(w, `{"status":"ok","version":"v9"}`)
		case "/v1/processes/p1/logs":
			for i := 0; i < 3; i++ {
				io.WriteString(w, `{"data":"YQ==","next":"c`+string(rune('0'+i))+`"`+map[bool]string{true: `,"eof":true`}[i == 2]+"}\n")
				w.(http.Flusher).Flush()
			}
		case "/v1/processes/gone":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"no-such-process","message":"gone"}}`)
		default:
			w.WriteHeader(204)
		}
	}))
	c := NewUnix(sock)
	ctx := context.Background()
	if err := c.do(ctx, "POST", "/v1/health", map[string]int{"a": 1}, new(Health)); err != nil {
		t.Fatal(err)
	}
	if gotBody != `{"a":1}` || gotType != "application/json" || gotAuth != "" {
		t.Fatalf("the server saw body %q, type %q, auth %q", gotBody, gotType, gotAuth)
	}
	h, err := c.Health(ctx)
	if err != nil || h.Version != "v9" {
		t.Fatalf("health: %+v %v", h, err)
	}
	var chunks []string
	err = c.Follow(ctx, "p1", LogQuery{}, func(ch LogChunk) error {
		chunks = append(chunks, string(ch.Data)+ch.Next)
		return nil
	})
	if err != nil || strings.Join(chunks, " ") != "ac0 ac1 ac2" {
		t.Fatalf("follow: %q %v", chunks, err)
	}
	_, err = c.Process(ctx, "gone")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "no-such-process" || ae.Message != "gone" {
		t.Fatalf("404: %#v", err)
	}
	if err := c.do(ctx, "GET", "/other", nil, nil); err != nil {
		t.Fatalf("204: %v", err)
	}
}

// No listener is ErrUnreachable, with the connect error a person reads.
func TestUnixTransportUnreachable(t *testing.T) {
	_, err := NewUnix(filepath.Join(t.TempDir(), "none.sock")).Health(context.Background())
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "connect: no such file or directory") {
		t.Fatalf("got %v", err)
	}
}

// A cancelled context ends a request blocked on a silent daemon, and the
// caller gets the context's error, not ErrUnreachable.
func TestUnixTransportCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	sock := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := NewUnix(sock).Health(ctx); done <- err }()
	time.AfterFunc(50*time.Millisecond, cancel)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not end within 10s of the cancel")
	}
}

// Garbage instead of HTTP is an error naming the malformed answer.
func TestUnixTransportMalformed(t *testing.T) {
	for _, answer := range []string{"SSH-2.0-x\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"} {
		sock := filepath.Join(t.TempDir(), "s.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			c.Read(buf)
			io.WriteString(c, answer)
			c.Close()
		}()
		_, err = NewUnix(sock).Health(context.Background())
		l.Close()
		if !errors.Is(err, errMalformed) {
			t.Errorf("answer %q: got %v, want errMalformed", answer, err)
		}
	}
}

// testTransports start a real server of h on each transport the build
// has and return a client of it (tcp_test.go adds TCP outside the lean
// client build).
var testTransports = map[string]func(t *testing.T, h http.Handler) *Client{
	"unix": func(t *testing.T, h http.Handler) *Client { return NewUnix(serveUnix(t, h)) },
}

// An answer the daemon stops sending midway (a kill -9 of serve, here a
// real server that drops the connection after part of the body) is
// ErrUnreachable, never io.ErrUnexpectedEOF alone or a short body read as
// complete: for every framing, over the unix transport and net/http's.
func TestCutOffAnswerIsUnreachable(t *testing.T) {
	cases := []struct{ name, head, body string }{
		{"content-length", "Content-Length: 100\r\n", `{"status":"ok","ver`},
		{"content-length-at-a-value-end", "Content-Length: 100\r\n", `{"status":"ok"}`},
		{"chunked", "Transfer-Encoding: chunked\r\n", "13\r\n{\"status\":\"ok\",\"ver\r\n"},
		{"until-close", "", `{"status":"ok","ver`},
	}
	for _, tc := range cases {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, bw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n" + tc.head + "\r\n" + tc.body)
			bw.Flush()
			conn.Close() // the daemon is gone mid-answer
		})
		for tr, dial := range testTransports {
			t.Run(tc.name+"/"+tr, func(t *testing.T) {
				c := dial(t, h)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := c.Health(ctx)
				if !errors.Is(err, ErrUnreachable) {
					t.Fatalf("a cut-off answer: %v (%T), want ErrUnreachable", err, err)
				}
				if !strings.Contains(err.Error(), "cut off") {
					t.Errorf("the message does not say the answer was cut off: %v", err)
				}
			})
		}
	}
}
