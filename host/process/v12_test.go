package process

import (
	"reflect"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
)

// TestV12To11Mapping checks the 1.2.0→1.1.0 mapping case by case: the
// error codes are the same descriptor (1.2.0 adds no case), a 1.1.0
// process-info is the 1.2.0 one without its last four fields, and a 1.1.0
// persist-options is 1.2.0's without a terminal.
func TestV12To11Mapping(t *testing.T) {
	if ver12.errorCode != ver11.errorCode || ver12.signal != ver11.signal {
		t.Fatal("1.2.0 must serve 1.1.0's error-code and process-signal descriptors")
	}
	if got, want := len(tProcessInfo12.Fields()), len(tProcessInfo.Fields())+4; got != want {
		t.Fatalf("process-info@1.2.0 has %d fields, want %d", got, want)
	}
	for i, f := range tProcessInfo.Fields() {
		if g := tProcessInfo12.Fields()[i]; g.Name != f.Name || g.Type.String() != f.Type.String() {
			t.Errorf("process-info field %d: 1.2.0 %s %s, 1.1.0 %s %s", i, g.Name, g.Type, f.Name, f.Type)
		}
	}
	yes, reapIn, rule := true, 90*time.Second, registry.ReasonIdle
	pid := uint32(7)
	infos := map[string]registry.Info{
		"pipe, exited": {ID: "a", Label: "l", Command: "/bin/true", Phase: registry.PhaseExited},
		"terminal, running": {ID: "b", Command: "bash", OSPid: &pid, Phase: registry.PhaseRunning,
			Terminal:        &registry.TerminalInfo{Rows: 24, Cols: 80, Term: "xterm-256color"},
			WaitingForInput: &yes, ReapIn: &reapIn, ReapRule: &rule},
	}
	for name, in := range infos {
		v11, v12 := processInfo(in, false).([]cabi.Value), processInfo(in, true).([]cabi.Value)
		if len(v11) != 14 || len(v12) != 18 || !reflect.DeepEqual(v11, v12[:14]) {
			t.Errorf("%s: 1.1.0 %v is not 1.2.0's prefix %v", name, v11, v12)
		}
	}
	if tail := processInfo(infos["terminal, running"], true).([]cabi.Value)[14:]; !reflect.DeepEqual(tail, []cabi.Value{
		cabi.Some([]cabi.Value{uint16(24), uint16(80), "xterm-256color"}), cabi.Some(true), cabi.Some(uint64(90000)), cabi.Some(uint32(registry.ReasonIdle)),
	}) {
		t.Errorf("1.2.0 tail = %v", tail)
	}

	base := []cabi.Value{cabi.None, true, uint32(1), cabi.None, cabi.None, cabi.None, cabi.None,
		[]cabi.Value{cabi.None, cabi.None, cabi.None, cabi.None}}
	o11 := persistOptions(base, false)
	o12 := persistOptions(append(append([]cabi.Value{}, base...), cabi.None), true)
	if !reflect.DeepEqual(o11, o12) || o11.Terminal != nil {
		t.Errorf("persist-options without a terminal: 1.1.0 %+v, 1.2.0 %+v", o11, o12)
	}
	term := cabi.Some([]cabi.Value{uint16(30), uint16(100), cabi.Some("vt100")})
	if o := persistOptions(append(append([]cabi.Value{}, base...), term), true); o.Terminal == nil ||
		*o.Terminal != (registry.TerminalOptions{Rows: 30, Cols: 100, Term: "vt100"}) {
		t.Errorf("persist-options with a terminal: %+v", o.Terminal)
	}
}

// TestWaitConditionCases: the WIT cases are registry.WaitKind in order,
// and wait-fired's enum likewise.
func TestWaitConditionCases(t *testing.T) {
	cur := "c1"
	tests := []struct {
		v    cabi.Variant
		want registry.WaitCondition
	}{
		{cabi.Variant{Case: 0, Payload: []cabi.Value{uint32(1), cabi.Some(cur), ">>> $"}},
			registry.WaitCondition{Kind: registry.WaitOutput, Stream: registry.Stderr, Cursor: &cur, Regex: ">>> $"}},
		{cabi.Variant{Case: 1, Payload: uint64(250)}, registry.WaitCondition{Kind: registry.WaitQuiet, Quiet: 250 * time.Millisecond}},
		{cabi.Variant{Case: 2}, registry.WaitCondition{Kind: registry.WaitInput}},
		{cabi.Variant{Case: 3}, registry.WaitCondition{Kind: registry.WaitExit}},
	}
	for _, tc := range tests {
		if got := waitCondition(tc.v); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("case %d: %+v, want %+v", tc.v.Case, got, tc.want)
		}
	}
	for k, name := range []string{"output-matched", "quiet", "input-wait", "exited"} {
		if c := tWaitFired.Cases()[k].Name; c != name || registry.WaitKind(k) != []registry.WaitKind{registry.WaitOutput, registry.WaitQuiet, registry.WaitInput, registry.WaitExit}[k] {
			t.Errorf("wait-fired %d = %s, want %s", k, c, name)
		}
	}
}
