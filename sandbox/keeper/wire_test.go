package keeper

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
)

// TestSpecWireCoversEveryField: every field of sandbox.ProcessSpec is
// set in the sample (so a new seam field fails here until the wire form
// carries it) and survives the trip through JSON unchanged.
func TestSpecWireCoversEveryField(t *testing.T) {
	s := sandbox.ProcessSpec{
		Argv: []string{"/bin/x", "ä"}, Path: "/usr/bin/x", Cwd: "/w", Env: []string{"A=1"},
		Stdin:     sandbox.StdinSpec{Mode: sandbox.StdinOpen, Data: []byte{0, 1, 255}},
		Output:    sandbox.OutputSpec{RingBytes: 1, SpillBytes: 2, Overflow: sandbox.Backpressure, SpillDir: "/s", Rate: sandbox.OutputRate{BytesPerSec: 3, Burst: 4}},
		Grace:     3 * time.Second,
		Drain:     4 * time.Millisecond,
		Limits:    sandbox.Limits{MemoryBytes: 5, CPUTime: 6 * time.Second, Pids: 7, OpenFiles: 8},
		Terminal:  &sandbox.TerminalSpec{Rows: 9, Cols: 10, Term: "xterm"},
		Isolation: sandbox.IsolationSpec{Workspace: "/ws", Network: true, Profile: "p"},
		Label:     "l",
	}
	noZero(t, reflect.ValueOf(s), "spec")
	w, err := specToWire(s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var w2 wireSpec
	if err := json.Unmarshal(b, &w2); err != nil {
		t.Fatal(err)
	}
	back, err := w2.spec()
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Fatalf("round trip:\n got %+v (%v)\nwant %+v\nwire %s", back, err, s, b)
	}
	for _, m := range []sandbox.StdinMode{0, 9} {
		s.Stdin.Mode = m
		w, _ := specToWire(s)
		if _, err := w.spec(); err == nil {
			t.Fatalf("stdin mode %d crossed the wire", m)
		}
	}
}

func noZero(t *testing.T, v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			noZero(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Pointer:
		if v.IsNil() {
			t.Fatalf("%s is nil in the sample: set it", path)
		}
		noZero(t, v.Elem(), path)
	default:
		if v.IsZero() {
			t.Fatalf("%s is zero in the sample: set it (and carry it in wireSpec)", path)
		}
	}
}

// TestErrorClasses: an error of several classes keeps all of them.
func TestErrorClasses(t *testing.T) {
	err := fromWire("read", toWire(&tornError{n: 3, err: errors.Join(sandbox.ErrClosed, sandbox.ErrSpill)}))
	for _, want := range []error{sandbox.ErrClosed, sandbox.ErrSpill} {
		if !errors.Is(err, want) {
			t.Fatalf("%v lost class %v", err, want)
		}
	}
	var te *tornError
	if !errors.As(err, &te) || te.n != 3 {
		t.Fatalf("torn count lost: %v", err)
	}
}
