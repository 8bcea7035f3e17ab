package process

import (
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/internal/cabi"
)

func flat(s string) string {
	// "i32*3 i64" → "i32 i32 i32 i64"
	var out []string
	for _, w := range strings.Fields(s) {
		n := 1
		if i := strings.IndexByte(w, '*'); i > 0 {
			for _, c := range w[i+1:] {
				n = n*10 + int(c-'0')
			}
			n -= pow10(len(w) - i - 1)
			w = w[:i]
		}
		for range n {
			out = append(out, w)
		}
	}
	return strings.Join(out, " ")
}

func pow10(n int) int {
	p := 1
	for range n {
		p *= 10
	}
	return p
}

// TestWITLayouts checks size, alignment, flattening and field offsets of
// every WIT type of both versions, computed by hand from CanonicalABI.md
// (align_to each field, discriminant u8, payload at align_to(1, max case
// alignment), joins i32|i64 → i64).
func TestWITLayouts(t *testing.T) {
	tests := []struct {
		t           *cabi.Type
		size, align uint32
		flat        string
		offsets     []uint32 // records
		payload     uint32   // variants
	}{
		{tEnvVar, 16, 4, "i32*4", []uint32{0, 8}, 0},
		{tSpawnRequest, 64, 8, "i32*13 i64", []uint32{0, 8, 16, 28, 36, 48}, 0},
		{tExitInfo, 16, 4, "i32*4", []uint32{0, 8}, 0},
		{tProcessResult, 36, 4, "i32*9", []uint32{0, 8, 16, 32}, 0},
		{tReadLogsResult, 48, 8, "i32*10 i64", []uint32{0, 8, 16, 20, 40}, 0},
		{tErrorCode10, 12, 4, "i32*3", nil, 4},
		{tErrorCode11, 16, 8, "i32 i64 i32", nil, 8},
		{tSignal10, 1, 1, "i32", nil, 1},
		{tSignal11, 1, 1, "i32", nil, 1},
		{tOverflow, 1, 1, "i32", nil, 1},
		{tResourceLimits, 48, 8, "i32 i64 i32 i64 i32*4", []uint32{0, 16, 32, 40}, 0},
		{tPersistOptions, 120, 8, "i32*8 i64 i32 i64 i32 i64 i32 i64 i32 i64 i32*4", []uint32{0, 12, 13, 16, 24, 40, 56, 72}, 0},
		{tPhase, 1, 1, "i32", nil, 1},
		{tLogStream, 1, 1, "i32", nil, 1},
		{tExitReason, 1, 1, "i32", nil, 1},
		{tLogChunk, 32, 8, "i32*4 i64 i32", []uint32{0, 8, 16, 24}, 0},
		{tProcessInfo, 136, 8, "i32*16 i64*4 i32*2 i64 i32 i64", []uint32{0, 8, 16, 24, 32, 36, 56, 64, 72, 80, 88, 96, 104, 120}, 0},
		{tExitEvent, 20, 4, "i32*5", []uint32{0, 16}, 0},
		{tEventKind, 24, 4, "i32*6", nil, 4},
		{tProcessEvent, 40, 8, "i64 i32*8", []uint32{0, 8, 16}, 0},
		{tEventBatch, 24, 8, "i32 i32 i64 i64", []uint32{0, 8, 16}, 0},
		{cabi.Record("", cabi.F("request", tSpawnRequest), cabi.F("options", tPersistOptions)), 184, 8, "", []uint32{0, 64}, 0},
		// Results as they appear in return areas.
		{cabi.Result(tProcessResult, tErrorCode11), 48, 8, "i32 i32 i64 i32*7", nil, 8},
		{cabi.Result(tProcessResult, tErrorCode10), 40, 4, "i32*10", nil, 4},
		{cabi.Result(nil, tErrorCode11), 24, 8, "i32 i32 i64 i32", nil, 8},
		{cabi.Result(nil, tErrorCode10), 16, 4, "i32*4", nil, 4},
		{cabi.Result(cabi.U32, tErrorCode11), 24, 8, "i32 i32 i64 i32", nil, 8},
		{cabi.Result(tOwnHandle, tErrorCode11), 24, 8, "i32 i32 i64 i32", nil, 8},
		{cabi.Result(tProcessID, tErrorCode11), 24, 8, "i32 i32 i64 i32", nil, 8},
		{cabi.Result(tExitInfo, tErrorCode11), 24, 8, "i32 i32 i64 i32 i32", nil, 8},
		{cabi.Result(cabi.List(tProcessInfo), tErrorCode11), 24, 8, "i32 i32 i64 i32", nil, 8},
		{cabi.Result(tProcessInfo, tErrorCode11), 144, 8, "i32 i32 i64 i32*14 i64*4 i32*2 i64 i32 i64", nil, 8},
		{cabi.Result(tLogChunk, tErrorCode11), 40, 8, "i32 i32 i64 i32 i32 i64 i32", nil, 8},
		{cabi.Result(tReadLogsResult, tErrorCode11), 56, 8, "i32 i32 i64 i32*8 i64", nil, 8},
		{cabi.Result(tEventBatch, tErrorCode11), 32, 8, "i32 i32 i64 i64 i64", nil, 8},
		// 1.2.0.
		{tTerminalSpec, 16, 4, "i32*5", []uint32{0, 2, 4}, 0},
		{tPersistOptions12, 144, 8, "i32*8 i64 i32 i64 i32 i64 i32 i64 i32 i64 i32*4 i32*6", []uint32{0, 12, 13, 16, 24, 40, 56, 72, 120}, 0},
		{cabi.Record("", cabi.F("request", tSpawnRequest), cabi.F("options", tPersistOptions12)), 208, 8, "", []uint32{0, 64}, 0},
		{tKey, 12, 4, "i32*3", nil, 4},
		{tScreenSnapshot, 56, 8, "i32*5 i32*4 i32*4 i32*2 i64*2", []uint32{0, 2, 4, 12, 14, 16, 17, 20, 28, 29, 30, 32, 40, 48}, 0},
		{tOutputMatch, 24, 4, "i32*6", []uint32{0, 4, 16}, 0},
		{tWaitCondition, 32, 8, "i32 i64 i32*5", nil, 8},
		{tWaitFired, 1, 1, "i32", nil, 1},
		{tWaitForResult, 12, 4, "i32*3", []uint32{0, 4}, 0},
		{tTerminalInfo, 12, 4, "i32*4", []uint32{0, 2, 4}, 0},
		{tProcessInfo12, 184, 8, "i32*16 i64*4 i32*2 i64 i32 i64 i32*5 i32*2 i32 i64 i32*2", []uint32{0, 8, 16, 24, 32, 36, 56, 64, 72, 80, 88, 96, 104, 120, 136, 152, 160, 176}, 0},
		{cabi.Result(tScreenSnapshot, tErrorCode11), 64, 8, "", nil, 8},
		{cabi.Result(tWaitForResult, tErrorCode11), 24, 8, "i32 i32 i64 i32", nil, 8},
	}
	for _, tc := range tests {
		t.Run(tc.t.String(), func(t *testing.T) {
			if tc.t.Size() != tc.size || tc.t.Align() != tc.align {
				t.Errorf("size/align = %d/%d, want %d/%d", tc.t.Size(), tc.t.Align(), tc.size, tc.align)
			}
			if tc.flat != "" {
				if got := cabi.FlatString(tc.t.Flat()); got != flat(tc.flat) {
					t.Errorf("flat = %s\n          want %s", got, flat(tc.flat))
				}
			}
			if tc.offsets != nil && !equal(tc.t.Offsets(), tc.offsets) {
				t.Errorf("offsets = %v, want %v", tc.t.Offsets(), tc.offsets)
			}
			if tc.payload != 0 && tc.t.PayloadOffset() != tc.payload {
				t.Errorf("payload offset = %d, want %d", tc.t.PayloadOffset(), tc.payload)
			}
		})
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// wantSigs is the core signature of every served function, by hand from
// the WIT (flatten_functype 'lower'). A function has the same core type
// in every version that has it; 1.0.0 serves the first 11, 1.1.0 the
// first 25, 1.2.0 all.
var wantSigs = []struct{ name, params, results string }{
	{"[method]process-handle.read-logs", "i32 i32", ""},
	{"[method]process-handle.write-stdin", "i32 i32 i32 i32", ""},
	{"[method]process-handle.close-stdin", "i32 i32", ""},
	{"[method]process-handle.signal", "i32 i32 i32", ""},
	{"[method]process-handle.kill", "i32 i32", ""},
	{"[method]process-handle.wait", "i32 i32 i64 i32", ""},
	{"[method]process-handle.wait-with-output", "i32 i32 i64 i32", ""},
	{"[method]process-handle.os-pid", "i32 i32", ""},
	{"[resource-drop]process-handle", "i32", ""},
	{"spawn", "i32*13 i64 i32", ""},
	{"spawn-background", "i32*13 i64 i32", ""},
	// 1.1.0 only.
	{"spawn-persistent", "i32 i32", ""}, // 35 flat params → one pointer
	{"attach", "i32*3", ""},
	{"list-processes", "i32*4", ""},
	{"status", "i32*3", ""},
	{"status-many", "i32*3", ""},
	{"read-since", "i32*8", ""},
	{"read-logs", "i32*3", ""},
	{"write-stdin", "i32*5", ""},
	{"close-stdin", "i32*3", ""},
	{"signal", "i32*4", ""},
	{"wait", "i32 i32 i64 i32", ""},
	{"stop", "i32 i32 i32 i64 i32", ""},
	{"release", "i32*3", ""},
	{"poll-events", "i64 i32 i64 i32", ""},
	// 1.2.0 only.
	{"send-keys", "i32*5", ""},
	{"paste", "i32*5", ""},
	{"submit", "i32*5", ""},
	{"resize", "i32*5", ""},
	{"snapshot", "i32*4", ""},
	{"wait-for", "i32 i32 i32 i64 i32*5 i64 i32", ""}, // id, wait-condition (disc, i64 join, 5 i32), timeout, retptr
}

// TestHostFuncSignatures: every HostFunc's core signature is the
// flattening of its WIT function, and each module serves exactly the WIT's
// function set (no extra, none missing).
func TestHostFuncSignatures(t *testing.T) {
	got := map[string]engine.HostFunc{}
	for _, f := range HostFuncs(nil) {
		k := f.Module + " " + f.Name
		if _, dup := got[k]; dup {
			t.Errorf("duplicate %s", k)
		}
		got[k] = f
	}
	want := 0
	for _, m := range Served() {
		n := len(wantSigs)
		switch m {
		case Module10:
			n = 11
		case Module11:
			n = 25
		}
		for _, w := range wantSigs[:n] {
			want++
			f, ok := got[m+" "+w.name]
			if !ok {
				t.Errorf("%s %s: not served", m, w.name)
				continue
			}
			if p := cabi.FlatString(f.Params); p != flat(w.params) {
				t.Errorf("%s %s params = %s, want %s", m, w.name, p, flat(w.params))
			}
			if r := cabi.FlatString(f.Results); r != flat(w.results) {
				t.Errorf("%s %s results = %s, want %s", m, w.name, r, flat(w.results))
			}
		}
	}
	if len(got) != want {
		t.Errorf("served %d functions, want %d", len(got), want)
	}
}
