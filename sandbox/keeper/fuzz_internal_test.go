package keeper

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// frameOf is a real frame as writeFrame puts it on the wire.
func frameOf(t testing.TB, body []byte) []byte {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go writeFrame(a, body, 0)
	out := make([]byte, 4+len(body))
	if _, err := io.ReadFull(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// seedFrames are the frames a real client and keeper exchange: a hello,
// a start with a full spec, a read, a response with a result and one with
// an error.
func seedFrames(t testing.TB) [][]byte {
	w, err := specToWire(sandbox.ProcessSpec{
		Argv: []string{"/bin/sh", "-c", "echo hi"}, Cwd: "/w", Env: []string{"A=1"},
		Stdin:    sandbox.StdinSpec{Mode: sandbox.StdinBytes, Data: []byte("in")},
		Output:   sandbox.OutputSpec{RingBytes: 4096, SpillBytes: 1 << 20, Overflow: sandbox.DropOldest},
		Grace:    time.Second,
		Limits:   sandbox.Limits{Pids: 64},
		Terminal: &sandbox.TerminalSpec{Rows: 24, Cols: 80, Term: "xterm"},
		Label:    "l",
	})
	if err != nil {
		t.Fatal(err)
	}
	bodies := []any{
		request{ID: 1, Op: opHello, Args: mustJSON(helloArgs{ProtocolVersion: ProtocolVersion, Client: "fuzz"})},
		request{ID: 2, Op: opStart, Args: mustJSON(startArgs{Spec: w})},
		request{ID: 3, Op: opRead, Args: mustJSON(logArgs{Ref: "r", Stream: "stdout", Max: 10})},
		response{ID: 2, Result: mustJSON(startResult{Ref: "r", PID: 7})},
		response{ID: 3, Error: toWire(sandbox.ErrClosed)},
	}
	var out [][]byte
	for _, b := range bodies {
		out = append(out, frameOf(t, mustJSON(b)))
	}
	return out
}

// FuzzFrame feeds a byte stream to the keeper's frame decoder, as a
// connection would, until it refuses. Properties: nothing panics; every
// frame read is exactly the bytes its header declared and writeFrame
// puts the same bytes back on the wire; a stream that ends cleanly
// between frames is io.EOF and every other refusal is ErrProtocol. Each
// frame then goes through what the server and client do with it: a
// request's start arguments become a spec or ErrInvalidSpec, and a spec
// that decoded survives specToWire → spec unchanged and its wire form
// is stable through JSON.
func FuzzFrame(f *testing.F) {
	seeds := seedFrames(f)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add(bytes.Join(seeds, nil))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Add(seeds[1][:len(seeds[1])-1])
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			before := r.Len()
			body, err := readFrame(nil, r, 0)
			if err != nil {
				checkFrameErr(t, err, before == 0)
				return
			}
			used := in[len(in)-before : len(in)-r.Len()]
			n := binary.BigEndian.Uint32(used)
			if int(n) != len(body) || len(body) == 0 || len(body) > MaxFrame || !bytes.Equal(used[4:], body) {
				t.Fatalf("frame of %d bytes from header %d: %q", len(body), n, used)
			}
			if again := frameOf(t, body); !bytes.Equal(again, used) {
				t.Fatalf("writeFrame wrote %q for %q", again, used)
			}
			checkFrameBody(t, body)
		}
	})
}

func checkFrameErr(t *testing.T, err error, atStart bool) {
	if atStart && errors.Is(err, io.EOF) {
		return
	}
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("refusal is not ErrProtocol (at start %v): %v", atStart, err)
	}
}

// checkFrameBody decodes a frame as the server (a request, its start
// arguments) and the client (a response, its error) do.
func checkFrameBody(t *testing.T, body []byte) {
	var resp response
	if json.Unmarshal(body, &resp) == nil && resp.Error != nil {
		_ = fromWire("fuzz", resp.Error).Error()
	}
	var req request
	if json.Unmarshal(body, &req) != nil {
		return
	}
	a, err := decode[startArgs](req.Args)
	if err != nil {
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("arguments refusal is not ErrProtocol: %v", err)
		}
		return
	}
	s, err := a.Spec.spec()
	if err != nil {
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Fatalf("spec refusal is not ErrInvalidSpec: %v", err)
		}
		return
	}
	w, err := specToWire(s)
	if err != nil {
		t.Fatalf("a spec decoded from JSON does not encode: %v", err)
	}
	back, err := w.spec()
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("spec round trip:\n got %+v (%v)\nwant %+v", back, err, s)
	}
	b1 := mustJSON(w)
	var w2 wireSpec
	if err := json.Unmarshal(b1, &w2); err != nil {
		t.Fatal(err)
	}
	if b2 := mustJSON(w2); !bytes.Equal(b1, b2) {
		t.Fatalf("wire form unstable:\n%s\n%s", b1, b2)
	}
}

// FuzzRecord decodes a per-process record file as a later keeper does
// (readRecord's json.Unmarshal into procRecord and exitRecord, then the
// exit's conversion). Properties: nothing panics, and a record that
// decoded encodes (writeRecord's MarshalIndent) to a form that decodes
// to the same record. Seeds are records as writeRecord writes them.
func FuzzRecord(f *testing.F) {
	at := time.Date(2026, 12, 2, 15, 0, 0, 123, time.UTC)
	for _, v := range []any{
		procRecord{Version: recordVer, Ref: "r1", PID: 42, StartTick: 12345, Label: "l", StartedAt: at},
		exitRecord{Version: recordVer, Ref: "r1", PID: 42, Exit: wireExit{Code: -1, Signal: 9, KilledFor: "timeout", At: at, Reason: ReasonKeeperLost}, StdoutSpill: "/s/out", StderrSpill: "/s/err"},
	} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append(b, '\n'))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p procRecord
		if json.Unmarshal(b, &p) == nil {
			roundTrip(t, p)
		}
		var x exitRecord
		if json.Unmarshal(b, &x) == nil {
			roundTrip(t, x)
			_ = x.Exit.exit()
		}
	})
}

// roundTrip: v encodes, and its encoding decodes to an equal value
// (compared by encoding again, so a time's location pointer does not
// matter). A value the encoder refuses is one we never write (a time
// outside years 0-9999 after its offset): that is a refusal, not a loss.
func roundTrip[T any](t *testing.T, v T) {
	b1, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return
	}
	var w T
	if err := json.Unmarshal(b1, &w); err != nil {
		t.Fatalf("our own encoding does not decode: %v\n%s", err, b1)
	}
	if b2, err := json.MarshalIndent(w, "", "  "); err != nil || !bytes.Equal(b1, b2) {
		t.Fatalf("round trip changed the record:\n%s\n%s (%v)", b1, b2, err)
	}
}
