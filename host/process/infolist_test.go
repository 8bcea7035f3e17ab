package process

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/host/internal/cabi/cabitest"
	"github.com/capsule-host/capsule-host/registry"
)

// genericInfos is list<process-info> as the generic path lowers it:
// every record boxed by processInfo.
func genericInfos(is []registry.Info, v12 bool) cabi.Value {
	out := make([]cabi.Value, len(is))
	for k, i := range is {
		out[k] = processInfo(i, v12)
	}
	return out
}

// lowered is one lowering of list-processes' result into a fresh guest.
type lowered struct {
	mem   []byte
	calls int
	stack []uint64
	err   error
}

// lowerListResult lowers result<list<process-info>, error-code> (ok:
// val) the way the list-processes import does, into a fresh cabitest
// guest whose allocator is deterministic, so two lowerings of the same
// values can be compared byte for byte.
func lowerListResult(t testing.TB, v *version, val cabi.Value) lowered {
	t.Helper()
	var f *cabi.Func
	for _, d := range v.funcs {
		if d.f.Name == "list-processes" {
			f = d.f
		}
	}
	c := cabitest.New(1<<20, 64)
	stack := []uint64{0, 0, 0, 16} // label-filter: none; the return pointer
	err := f.LowerResult(context.Background(), c, stack, cabi.Ok(val))
	return lowered{mem: c.Mem.B, calls: c.Calls, stack: stack, err: err}
}

// checkSameLowering fails unless the hand-written and the generic
// lowering of is agree: the same bytes, the same cabi_realloc calls, or
// both an ErrABI error.
func checkSameLowering(t *testing.T, v *version, is []registry.Info) {
	t.Helper()
	g := lowerListResult(t, v, genericInfos(is, v.v12))
	h := lowerListResult(t, v, infoList{is, v.v12})
	if g.err != nil || h.err != nil {
		if !errors.Is(g.err, cabi.ErrABI) || !errors.Is(h.err, cabi.ErrABI) {
			t.Fatalf("%s: generic err %v, hand-written err %v: want both ErrABI or neither", v.module, g.err, h.err)
		}
		return
	}
	if g.calls != h.calls {
		t.Fatalf("%s: %d cabi_realloc calls, generic %d", v.module, h.calls, g.calls)
	}
	if i := firstDiff(g.mem, h.mem); i >= 0 {
		t.Fatalf("%s: memory differs at %#x: hand-written % x, generic % x", v.module, i, h.mem[i:min(i+16, len(h.mem))], g.mem[i:min(i+16, len(g.mem))])
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func ptr[T any](v T) *T { return &v }

// infoCases covers every field of both versions: absent and present
// options, each exit form, both kinds of string repair, the saturating
// duration conversions, and values outside an enum.
var infoCases = []struct {
	name string
	is   []registry.Info
}{
	{"empty", nil},
	{"bare", []registry.Info{{ID: "a"}}},
	{"running", []registry.Info{{
		ID: strings.Repeat("b", 52), Label: "s1", Command: "/bin/sh", OSPid: ptr(uint32(4242)), Phase: registry.PhaseRunning,
		Age: 90 * time.Second, Idle: 3 * time.Millisecond, BufferedBytes: 7, BytesDropped: 1 << 40, StdinOpen: true,
		CPU: ptr(1500 * time.Millisecond), MemPeak: ptr(uint64(1 << 33)),
	}}},
	{"exited code", []registry.Info{{ID: "c", Phase: registry.PhaseExited, Exit: &registry.Exit{Code: ptr(int32(-3))}, Reason: ptr(registry.ReasonSelfExit)}}},
	{"exited signal", []registry.Info{{ID: "d", Phase: registry.PhaseExited, Exit: &registry.Exit{Signal: ptr(int32(9))}, Reason: ptr(registry.ReasonKilled)}}},
	{"exit both, no reason", []registry.Info{{ID: "e", Exit: &registry.Exit{Code: ptr(int32(math.MinInt32)), Signal: ptr(int32(math.MaxInt32))}}}},
	{"exit empty", []registry.Info{{ID: "f", Exit: &registry.Exit{}, Reason: ptr(registry.ReasonRemoved)}}},
	{"strings repaired", []registry.Info{{ID: "g", Label: "bad \xff label", Command: "naïve \xe2\x82 ☃", Terminal: &registry.TerminalInfo{Term: "x\xfe"}}}},
	{"durations", []registry.Info{{ID: "h", Age: -time.Second, Idle: time.Duration(math.MaxInt64), CPU: ptr(-time.Nanosecond), ReapIn: ptr(time.Duration(math.MaxInt64))}}},
	{"terminal", []registry.Info{
		{ID: "i", Terminal: &registry.TerminalInfo{Rows: 24, Cols: 80, Term: "xterm-256color"}, WaitingForInput: ptr(true)},
		{ID: "j", Terminal: &registry.TerminalInfo{Rows: math.MaxUint16, Cols: 1}, WaitingForInput: ptr(false), ReapIn: ptr(time.Minute), ReapRule: ptr(registry.ReasonIdle)},
	}},
	{"several", []registry.Info{{ID: "k", Label: "one"}, {ID: "l", Command: "two"}, {ID: "m", Label: "three", Command: "3"}}},
	{"bad phase", []registry.Info{{ID: "n", Phase: registry.Phase(3)}}},
	{"bad reason", []registry.Info{{ID: "o", Reason: ptr(registry.Reason(7))}}},
	{"bad reap rule", []registry.Info{{ID: "p", ReapRule: ptr(registry.Reason(99))}}},
	{"invalid id", []registry.Info{{ID: "q\xff"}}},
}

// TestInfoListMatchesGeneric: the hand-written list<process-info>
// lowering writes what the generic one writes, for 1.1.0 and 1.2.0.
func TestInfoListMatchesGeneric(t *testing.T) {
	for _, tc := range infoCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []*version{ver11, ver12} {
				checkSameLowering(t, v, tc.is)
			}
		})
	}
	// Every case in one list: strings of many records interleave with
	// the list's own allocation exactly as generically.
	var all []registry.Info
	for _, tc := range infoCases[:len(infoCases)-4] { // the valid ones
		all = append(all, tc.is...)
	}
	for _, v := range []*version{ver11, ver12} {
		checkSameLowering(t, v, all)
		// And it is the list: ok, (ptr, len) at the return pointer.
		h := lowerListResult(t, v, infoList{all, v.v12})
		pay := 16 + res(v, cabi.List(v.info)).PayloadOffset()
		if h.mem[16] != 0 || binary.LittleEndian.Uint32(h.mem[pay+4:]) != uint32(len(all)) || h.calls <= len(all) {
			t.Fatalf("%s: result % x after %d realloc calls, want ok and %d records", v.module, h.mem[16:pay+8], h.calls, len(all))
		}
	}
}

// TestInfoListErrors: a value outside an enum or an invalid ID fails as
// ErrABI naming the record and the field.
func TestInfoListErrors(t *testing.T) {
	is := []registry.Info{{ID: "ok"}, {ID: "x", Reason: ptr(registry.Reason(7))}}
	h := lowerListResult(t, ver12, infoList{is, true})
	if !errors.Is(h.err, cabi.ErrABI) || !strings.Contains(h.err.Error(), "[1].exit-reason") {
		t.Fatalf("err = %v, want ErrABI at [1].exit-reason", h.err)
	}
	// Lowered as another element type, it refuses rather than writes.
	var l cabi.Lowerer
	if _, _, err := (infoList{is, true}).LowerList(&l, tProcessInfo); !errors.Is(err, cabi.ErrABI) {
		t.Fatalf("1.2.0 list lowered as 1.1.0: err = %v", err)
	}
}

// FuzzInfoList: for any strings, numbers and choice of present fields,
// the hand-written lowering equals the generic one in both versions.
func FuzzInfoList(f *testing.F) {
	f.Add("id", "label", "cmd", "xterm", uint64(1), uint64(2), uint32(3), int32(-1), uint16(0xffff), uint8(0))
	f.Add(strings.Repeat("z", 52), "\xff", "", "", uint64(math.MaxUint64), uint64(0), uint32(0), int32(9), uint16(7), uint8(5))
	f.Fuzz(func(t *testing.T, id, label, cmd, term string, a, b uint64, pid uint32, code int32, flags uint16, enum uint8) {
		on := func(bit int) bool { return flags&(1<<bit) != 0 }
		i := registry.Info{
			ID: id, Label: label, Command: cmd, Phase: registry.Phase(enum % 4), Age: time.Duration(a), Idle: time.Duration(b),
			BufferedBytes: a, BytesDropped: b, StdinOpen: on(0),
		}
		if on(1) {
			i.OSPid = &pid
		}
		if on(2) {
			i.Exit = &registry.Exit{}
			if on(3) {
				i.Exit.Code = &code
			}
			if on(4) {
				i.Exit.Signal = &code
			}
		}
		if on(5) {
			i.Reason = ptr(registry.Reason(enum % 8))
		}
		if on(6) {
			i.CPU = ptr(time.Duration(b))
		}
		if on(7) {
			i.MemPeak = &a
		}
		if on(8) {
			i.Terminal = &registry.TerminalInfo{Rows: uint16(a), Cols: uint16(b), Term: term}
		}
		if on(9) {
			i.WaitingForInput = ptr(on(10))
		}
		if on(11) {
			i.ReapIn = ptr(time.Duration(a))
		}
		if on(12) {
			i.ReapRule = ptr(registry.Reason(enum % 9))
		}
		is := []registry.Info{i, {ID: label, Label: id}}
		for _, v := range []*version{ver11, ver12} {
			checkSameLowering(t, v, is)
		}
	})
}
