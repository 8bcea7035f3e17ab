package keeper

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// internalKeeper starts a keeper for the white-box tests and stops it
// (with its processes) at the end.
func internalKeeper(t *testing.T) (string, *Process) {
	t.Helper()
	dir, err := os.MkdirTemp("", "keeper-test-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(Config{Dir: dir, FrameTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := Dial(ctx, dir); err == nil {
			c.Shutdown(ctx, true)
			c.Close()
		}
		select {
		case <-p.Done():
		case <-ctx.Done():
			p.kill()
			t.Errorf("keeper %d did not exit", p.PID)
		}
		os.RemoveAll(dir)
	})
	return dir, p
}

func (p *Process) kill() {
	if proc, err := os.FindProcess(p.PID); err == nil {
		proc.Kill()
	}
	<-p.done
}

func rawConn(t *testing.T, dir string) net.Conn {
	t.Helper()
	nc, err := net.Dial("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

func sendFrame(t *testing.T, nc net.Conn, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(nc, b, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func recvFrame(t *testing.T, nc net.Conn) response {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := readFrame(nc, nc, 10*time.Second)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	var r response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// expectDropped checks that the keeper closes the connection (bounded:
// the frame timeout is one second).
func expectDropped(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		var buf [4096]byte
		_, err := nc.Read(buf[:])
		if err == nil {
			continue // an error frame before the close is fine
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("connection not dropped")
		}
		return
	}
}

func hello(t *testing.T, nc net.Conn) {
	t.Helper()
	sendFrame(t, nc, request{ID: 1, Op: opHello, Args: mustJSON(helloArgs{ProtocolVersion: ProtocolVersion, Client: "test"})})
	if r := recvFrame(t, nc); r.Error != nil {
		t.Fatalf("hello: %+v", r.Error)
	}
}

// TestProtocolFaults: each fault drops only the faulty client; a client
// connected all along, with a watch parked, keeps working, and so does
// the process.
func TestProtocolFaults(t *testing.T) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	good, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	sp := sandbox.ProcessSpec{Argv: []string{"/usr/bin/bash", "-c", `exec -a keeper-test-fault /usr/bin/sleep 1000`}, Cwd: "/", Stdin: sandbox.StdinSpec{Mode: sandbox.StdinClosed},
		Output: sandbox.OutputSpec{RingBytes: 4096, Overflow: sandbox.DropOldest}, Grace: time.Second, Drain: time.Second}
	st, err := good.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	parked := make(chan error, 1)
	go func() {
		_, err := good.Wait(ctx, st.Ref)
		parked <- err
	}()
	faults := []struct {
		name string
		do   func(t *testing.T, nc net.Conn)
	}{
		{"unknown version", func(t *testing.T, nc net.Conn) {
			sendFrame(t, nc, request{ID: 1, Op: opHello, Args: mustJSON(helloArgs{ProtocolVersion: 99, Client: "future"})})
			r := recvFrame(t, nc)
			if r.Error == nil || !reflect.DeepEqual(r.Error.Supported, []int{ProtocolVersion}) || !errors.Is(fromWire("hello", r.Error), ErrProtocolVersion) {
				t.Fatalf("answer to version 99: %+v", r)
			}
		}},
		{"garbage", func(t *testing.T, nc net.Conn) { nc.Write([]byte("GET / HTTP/1.1\r\nHost: keeper\r\n\r\n")) }},
		{"garbage body", func(t *testing.T, nc net.Conn) {
			hello(t, nc)
			writeFrame(nc, []byte("\x00\xffnot json at all"), time.Second)
		}},
		{"huge length", func(t *testing.T, nc net.Conn) {
			hello(t, nc)
			nc.Write([]byte{0xff, 0xff, 0xff, 0xff})
		}},
		{"half frame then close", func(t *testing.T, nc net.Conn) {
			hello(t, nc)
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], 100)
			nc.Write(append(hdr[:], `{"id":2,"op"`...))
			nc.(*net.UnixConn).CloseWrite()
		}},
		{"half frame then silence", func(t *testing.T, nc net.Conn) {
			hello(t, nc)
			nc.Write([]byte{0, 0})
		}},
		{"no hello", func(t *testing.T, nc net.Conn) {}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			nc := rawConn(t, dir)
			f.do(t, nc)
			expectDropped(t, nc)
			checkBystander(t, good, st.Ref, parked)
		})
	}
	if _, err := dial(ctx, dir, 99); !errors.Is(err, ErrProtocolVersion) {
		t.Fatalf("Dial with version 99: %v, want ErrProtocolVersion", err)
	}
}

func checkBystander(t *testing.T, c *Client, ref sandbox.Ref, parked chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Inspect(ctx, ref)
	if err != nil || st.Phase != sandbox.PhaseRunning {
		t.Fatalf("bystander inspect: %+v, %v", st, err)
	}
	if _, _, err := c.Read(ctx, ref, Stdout, 0, 10); err != nil {
		t.Fatalf("bystander read: %v", err)
	}
	select {
	case err := <-parked:
		t.Fatalf("the bystander's parked wait ended: %v", err)
	default:
	}
}

// TestInFlight: requests are answered by id in any order; a wait that
// times out client-side is cancelled in the keeper.
func TestInFlight(t *testing.T) {
	dir, _ := internalKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sp := sandbox.ProcessSpec{Argv: []string{"/bin/sh", "-c", "read x; echo got $x; exit 3", "keeper-test-inflight"}, Cwd: "/", Stdin: sandbox.StdinSpec{Mode: sandbox.StdinOpen},
		Output: sandbox.OutputSpec{RingBytes: 4096, Overflow: sandbox.DropOldest}, Grace: time.Second, Drain: time.Second}
	st, err := c.Start(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if _, err := c.Wait(short, st.Ref); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a short deadline: %v", err)
	}
	waited := make(chan Exit, 1)
	go func() {
		x, _ := c.Wait(ctx, st.Ref)
		waited <- x
	}()
	watched := make(chan WatchResult, 1)
	go func() {
		r, _ := c.Watch(ctx, st.Ref, WatchRequest{Stdout: 0, Stderr: -1})
		watched <- r
	}()
	if _, err := c.WriteStdin(ctx, st.Ref, []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	r := <-watched
	if r.Stdout.End == 0 {
		t.Fatalf("watch fired without output: %+v", r)
	}
	if x := <-waited; x.Code != 3 || x.Reason != ReasonExited {
		t.Fatalf("exit %+v", x)
	}
	c.mu.Lock()
	n := len(c.pending)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d requests still pending in the client", n)
	}
}
