package wire

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
)

// Layouts worked by hand from CanonicalABI.md's rules, field by field
// (see the comments), checked against what the bindings compute.
func TestContractLayouts(t *testing.T) {
	tests := []struct {
		name        string
		typ         abi.Type
		size, align uint32
		offs        []uint32
		nflat       int
	}{
		// cmd@0 args@8 stdin(opt list: disc@16 payload@20)@16 env@28
		// cwd(opt string)@36 timeout(opt u64: disc, payload@+8)@48 -> 64
		{"spawn-request", LSpawnRequest, 64, 8, []uint32{0, 8, 16, 28, 36, 48}, 14},
		// label(opt string)@0 keep@12 overflow@13 ring(opt u32)@16
		// lifetime@24 idle@40 retention@56 limits@72 (48 bytes) -> 120
		{"persist-options", LPersistOptions, 120, 8, []uint32{0, 12, 13, 16, 24, 40, 56, 72}, 21},
		{"resource-limits", LResourceLimits, 48, 8, []uint32{0, 16, 32, 40}, 8},
		{"(spawn-request, persist-options)", LSpawnPersistentParams, 184, 8, []uint32{0, 64}, 35},
		{"exit-info", LExitInfo, 16, 4, []uint32{0, 8}, 4},
		{"process-result", LProcessResult, 36, 4, []uint32{0, 8, 16, 32}, 9},
		{"read-logs-result", LReadLogsResult, 48, 8, []uint32{0, 8, 16, 20, 40}, 11},
		{"log-chunk", LLogChunk, 32, 8, []uint32{0, 8, 16, 24}, 6},
		// id@0 label@8 command@16 os-pid@24 phase@32 exit@36(20)
		// exit-reason@56(2) age@64 idle@72 buffered@80 dropped@88
		// stdin-open@96 cpu@104 mem@120 -> 136
		{"process-info", LProcessInfo, 136, 8, []uint32{0, 8, 16, 24, 32, 36, 56, 64, 72, 80, 88, 96, 104, 120}, 25},
		{"exit-event", LExitEvent, 20, 4, []uint32{0, 16}, 5},
		{"process-event", LProcessEvent, 40, 8, []uint32{0, 8, 16}, 9},
		{"event-batch", LEventBatch, 24, 8, []uint32{0, 8, 16}, 4},
		{"error-code@1.1.0", LErrorCode11, 16, 8, nil, 3},
		{"error-code@1.0.0", LErrorCode10, 12, 4, nil, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.typ.Size != tt.size || tt.typ.Align != tt.align {
				t.Errorf("size/align = %d/%d, want %d/%d", tt.typ.Size, tt.typ.Align, tt.size, tt.align)
			}
			if tt.offs != nil && !slices.Equal(tt.typ.Offs, tt.offs) {
				t.Errorf("offsets = %v, want %v", tt.typ.Offs, tt.offs)
			}
			if len(tt.typ.Flat) != tt.nflat {
				t.Errorf("flat count = %d, want %d", len(tt.typ.Flat), tt.nflat)
			}
		})
	}
	// error-code@1.1.0 flattens to [i32, i64, i32]: string (i32, i32)
	// joined with torn-write's u64 (i64).
	if !slices.Equal(LErrorCode11.Flat, []abi.Core{abi.I32, abi.I64, abi.I32}) || LErrorCode11.Payload != 8 {
		t.Errorf("error-code@1.1.0 flat %v payload %d", LErrorCode11.Flat, LErrorCode11.Payload)
	}
	if !slices.Equal(LErrorCode10.Flat, []abi.Core{abi.I32, abi.I32, abi.I32}) || LErrorCode10.Payload != 4 {
		t.Errorf("error-code@1.0.0 flat %v payload %d", LErrorCode10.Flat, LErrorCode10.Payload)
	}
	// spawn-persistent has more than 16 flat params: passed by pointer.
	if n := len(LSpawnPersistentParams.Flat); n <= abi.MaxFlatParams {
		t.Errorf("spawn-persistent flat params %d, expected > 16", n)
	}
	// ResultShape agrees with the full layout for every ok payload used.
	for _, ok := range []*abi.Type{nil, &abi.String, &abi.U32, &abi.Handle, abi.Ptr(abi.List()), &LProcessResult,
		&LReadLogsResult, &LLogChunk, &LProcessInfo, &LExitInfo, &LEventBatch} {
		for _, ec := range []abi.Type{LErrorCode10, LErrorCode11} {
			rt := ResultOf(ok, ec)
			if sz, al, pl := ResultShape(ok, ec); sz != rt.Size || al != rt.Align || pl != rt.Payload {
				t.Errorf("ResultShape = %d/%d/%d, layout %d/%d/%d", sz, al, pl, rt.Size, rt.Align, rt.Payload)
			}
		}
	}
	// result<process-id, error-code> at 1.1.0: payload at 8, 24 bytes.
	r := ResultOf(&abi.String, LErrorCode11)
	if r.Payload != 8 || r.Size != 24 || !slices.Equal(r.Flat, []abi.Core{abi.I32, abi.I32, abi.I64, abi.I32}) {
		t.Errorf("result<string, error-code> = %+v", r)
	}
}

func TestStoreSpawnRequestMatchesFlat(t *testing.T) {
	s := &abi.Scope{}
	defer s.Free()
	to := uint64(1234)
	cwd := "sub/dir"
	req := SpawnRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo hi"}, Stdin: []byte("in"),
		Env: []EnvVar{{Key: "A", Value: "1"}, {Key: "B", Value: "two"}}, Cwd: &cwd, TimeoutMS: &to}
	f := FlatSpawnRequest(s, &req)
	_, m := s.Alloc(LSpawnRequest.Size, LSpawnRequest.Align)
	StoreSpawnRequest(s, m, 0, &req)

	// The flat values and the stored record must describe the same data.
	l := abi.Lifter{M: s}
	flatStr := func(p, n uint64) string {
		var pair [8]byte
		abi.PutU32(pair[:], 0, uint32(p))
		abi.PutU32(pair[:], 4, uint32(n))
		return l.String(pair[:], 0, "flat")
	}
	o := LSpawnRequest.Offs
	if got := flatStr(f[0], f[1]); got != "/bin/sh" || l.String(m, o[0], "cmd") != got {
		t.Errorf("cmd %q", got)
	}
	if f[3] != 2 || abi.GetU32(m, o[1]+4) != 2 {
		t.Errorf("args len %d", f[3])
	}
	if f[4] != 1 || flatStr(f[5], f[6]) != "in" || abi.GetU8(m, o[2]) != 1 || l.String(m, o[2]+4, "stdin") != "in" {
		t.Error("stdin mismatch")
	}
	env := l.List(m, o[3], LEnvVar, "env")
	if f[8] != 2 || len(env) != 2 || l.String(env[1], 0, "k") != "B" || l.String(env[1], 8, "v") != "two" {
		t.Error("env mismatch")
	}
	if f[9] != 1 || flatStr(f[10], f[11]) != cwd || l.String(m, o[4]+4, "cwd") != cwd {
		t.Error("cwd mismatch")
	}
	if f[12] != 1 || f[13] != 1234 || abi.GetU8(m, o[5]) != 1 || abi.GetU64(m, o[5]+8) != 1234 {
		t.Error("timeout mismatch")
	}
	if l.Err != nil {
		t.Fatal(l.Err)
	}

	// Absent options: discriminant 0, payload slots 0.
	var empty SpawnRequest
	f = FlatSpawnRequest(s, &empty)
	if f[4] != 0 || f[5] != 0 || f[9] != 0 || f[12] != 0 || f[13] != 0 {
		t.Errorf("none options lowered as %v", f)
	}
}

func TestStorePersistOptions(t *testing.T) {
	s := &abi.Scope{}
	defer s.Free()
	label := "web"
	ring := uint32(4096)
	pids := uint32(7)
	mem := uint64(1 << 30)
	po := PersistOptions{Label: &label, KeepStdinOpen: true, Overflow: Backpressure, LogRingBytes: &ring,
		IdleTimeoutMS: new(uint64(9)), Limits: ResourceLimits{MaxMemoryBytes: &mem, MaxPids: &pids}}
	_, m := s.Alloc(LPersistOptions.Size, LPersistOptions.Align)
	StorePersistOptions(s, m, 0, &po)
	l := abi.Lifter{M: s}
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"label disc", uint64(m[0]), 1},
		{"keep", uint64(m[12]), 1},
		{"overflow", uint64(m[13]), 1},
		{"ring disc", uint64(m[16]), 1},
		{"ring", uint64(abi.GetU32(m, 20)), 4096},
		{"lifetime disc", uint64(m[24]), 0},
		{"idle disc", uint64(m[40]), 1},
		{"idle", abi.GetU64(m, 48), 9},
		{"retention disc", uint64(m[56]), 0},
		{"mem disc", uint64(m[72]), 1},
		{"mem", abi.GetU64(m, 80), 1 << 30},
		{"cpu disc", uint64(m[88]), 0},
		{"pids disc", uint64(m[104]), 1},
		{"pids", uint64(abi.GetU32(m, 108)), 7},
		{"files disc", uint64(m[112]), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if l.String(m, 4, "label") != "web" || l.Err != nil {
		t.Errorf("label: %v", l.Err)
	}
}

// hostString plays the host lowering a string: cabi_realloc, copy, and
// (ptr, len) at b[off:].
func hostString(b []byte, off uint32, v string) {
	p := abi.Realloc(0, 0, 1, uint32(len(v)))
	abi.Current().Poke(p, []byte(v))
	abi.PutU32(b, off, p)
	abi.PutU32(b, off+4, uint32(len(v)))
}

func TestLiftResults(t *testing.T) {
	s := &abi.Scope{}
	defer s.Free()
	s.Enter()
	defer s.Leave()

	// result<list<process-info>, error-code>: ok with one element.
	rt := ResultOf(abi.Ptr(abi.List()), LErrorCode11)
	_, ret := s.Alloc(rt.Size, rt.Align)
	lp := abi.Realloc(0, 0, LProcessInfo.Align, LProcessInfo.Size)
	e, _ := s.Load(lp, LProcessInfo.Size)
	hostString(e, 0, "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrst")
	hostString(e, 8, "web")
	hostString(e, 16, "/bin/sh -c x")
	e[24], e[28] = 1, 42 // os-pid some(42)
	e[32] = 2            // exited
	e[36] = 1            // exit some
	e[40], e[44] = 0, 0  // exit-code none
	e[48], e[52] = 1, 9  // signal some(9)
	e[56], e[57] = 1, 2  // exit-reason some(killed)
	abi.PutU64(e, 64, 1500)
	abi.PutU64(e, 96, 0)
	e[96] = 1
	e[104] = 0
	e[120] = 1
	abi.PutU64(e, 128, 77)
	abi.PutU32(ret, rt.Payload, lp)
	abi.PutU32(ret, rt.Payload+4, 1)
	infos, err := LiftResult(s, ret, abi.Ptr(abi.List()), LErrorCode11, 14, LiftProcessInfos)
	if err != nil {
		t.Fatal(err)
	}
	pi := infos[0]
	if pi.Label != "web" || *pi.OSPid != 42 || pi.Phase != PhaseExited || pi.Exit.ExitCode != nil ||
		*pi.Exit.Signal != 9 || *pi.ExitReason != ReasonKilled || pi.AgeMS != 1500 || !pi.StdinOpen ||
		pi.CPUMS != nil || *pi.MemBytesPeak != 77 {
		t.Errorf("lifted %+v", pi)
	}

	// Errors: torn-write carries a u64 at payload 8; string cases a message.
	ret2 := make([]byte, rt.Size)
	ret2[0] = 1
	ret2[rt.Payload] = byte(ErrTornWrite)
	abi.PutU64(ret2, rt.Payload+8, 12345)
	_, err = LiftResult(s, ret2, abi.Ptr(abi.List()), LErrorCode11, 14, LiftProcessInfos)
	var pe *Error
	if !errors.Is(err, ErrTornWrite) || !errors.As(err, &pe) || pe.Written != 12345 {
		t.Errorf("torn-write lifted as %v", err)
	}
	ret2[rt.Payload] = byte(ErrInvalidInput)
	hostString(ret2, rt.Payload+8, "cursor: malformed")
	_, err = LiftResult(s, ret2, abi.Ptr(abi.List()), LErrorCode11, 14, LiftProcessInfos)
	if !errors.Is(err, ErrInvalidInput) || err.Error() != "invalid-input: cursor: malformed" {
		t.Errorf("invalid-input lifted as %v", err)
	}
	// A discriminant beyond 1.0.0's ten cases is an ABI violation there.
	ret2[rt.Payload] = byte(ErrNoSuchProcess)
	_, err = LiftResult(s, ret2, abi.Ptr(abi.List()), LErrorCode11, 10, LiftProcessInfos)
	if !errors.Is(err, ErrInternal) {
		t.Errorf("out-of-range case lifted as %v", err)
	}
	// A pointer the host did not allocate is refused, not followed.
	ret[0] = 0
	abi.PutU32(ret, rt.Payload, 0x7777_0000)
	if _, err := LiftResult(s, ret, abi.Ptr(abi.List()), LErrorCode11, 14, LiftProcessInfos); !errors.Is(err, ErrInternal) {
		t.Errorf("forged pointer lifted as %v", err)
	}
}

func TestLiftEventBatch(t *testing.T) {
	s := &abi.Scope{}
	defer s.Free()
	s.Enter()
	defer s.Leave()
	_, b := s.Alloc(LEventBatch.Size, 8)
	lp := abi.Realloc(0, 0, 8, 3*40)
	ev, _ := s.Load(lp, 120)
	for i := range 3 {
		e := ev[i*40 : i*40+40]
		abi.PutU64(e, 0, uint64(i+1))
		hostString(e, 8, "id")
		e[16] = byte(i)
	}
	// exited: exit-event at payload 4: exit-info{code some(3)}, reason@+16
	ev[20], ev[24] = 1, 3
	ev[20+16] = byte(ReasonLifetime)
	ev[40+20] = 1 // log-ready(stderr)
	abi.PutU32(b, 0, lp)
	abi.PutU32(b, 4, 3)
	abi.PutU64(b, 8, 4)
	abi.PutU64(b, 16, 2)
	l := abi.Lifter{M: s}
	eb := LiftEventBatch(&l, b, 0)
	if l.Err != nil {
		t.Fatal(l.Err)
	}
	if len(eb.Events) != 3 || eb.Next != 4 || eb.Missed != 2 {
		t.Fatalf("batch %+v", eb)
	}
	if e := eb.Events[0]; e.Kind != EventExited || *e.Exit.Exit.ExitCode != 3 || e.Exit.Reason != ReasonLifetime {
		t.Errorf("event 0 %+v", e)
	}
	if e := eb.Events[1]; e.Kind != EventLogReady || e.Stream != Stderr || e.Seq != 2 {
		t.Errorf("event 1 %+v", e)
	}
	if e := eb.Events[2]; e.Kind != EventStdinDrained {
		t.Errorf("event 2 %+v", e)
	}
}

// TestLiftProcessInfoBadCase: a discriminant out of range in any field
// fails the lift and names that field, though the fields' discriminants
// are first read together.
func TestLiftProcessInfoBadCase(t *testing.T) {
	o := LProcessInfo.Offs
	for _, tc := range []struct {
		at   uint32
		v    byte
		want string
	}{
		{o[3], 2, "process-info.os-pid"},
		{o[4], 3, "process-info.phase"},
		{o[5], 2, "process-info.exit"},
		{o[5] + optExitInfo.Payload + LExitInfo.Offs[0], 2, "exit-info.exit-code"}, // exit some, then its own option
		{o[6], 2, "process-info.exit-reason"},
		{o[6] + optEnum7.Payload, 7, "exit-reason"}, // exit-reason some(7)
		{o[12], 5, "process-info.cpu-ms"},
		{o[13], 255, "process-info.mem-bytes-peak"},
	} {
		b := make([]byte, LProcessInfo.Size)
		switch tc.want {
		case "exit-info.exit-code":
			b[o[5]] = 1
		case "exit-reason":
			b[o[6]] = 1
		}
		b[tc.at] = tc.v
		l := abi.Lifter{M: &abi.Scope{}}
		pi := LiftProcessInfo(&l, b, 0)
		if l.Err == nil || !strings.Contains(l.Err.Error(), tc.want+":") {
			t.Errorf("byte %d = %d: err %v, want one naming %s", tc.at, tc.v, l.Err, tc.want)
		}
		if pi.OSPid != nil || pi.ExitReason != nil || pi.CPUMS != nil {
			t.Errorf("byte %d = %d: a failed lift filled options: %+v", tc.at, tc.v, pi)
		}
	}
}
