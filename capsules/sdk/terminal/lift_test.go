package terminal

import (
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
)

// hostInfo plays the host: a 1.2.0 process-info with every option of
// the four 1.2.0 fields present, its strings allocated in s.
func hostInfo(s *abi.Scope) []byte {
	s.Enter()
	defer s.Leave()
	b := make([]byte, lInfo.Size)
	str := func(off uint32, v string) {
		p := abi.Realloc(0, 0, 1, uint32(len(v)))
		s.Poke(p, []byte(v))
		abi.PutU32(b, off, p)
		abi.PutU32(b, off+4, uint32(len(v)))
	}
	o := lInfo.Offs
	str(o[0], "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrst")
	b[o[4]] = 1 // running
	t := o[14] + optTerminalInfo.Payload
	b[o[14]] = 1
	abi.PutU32(b, t, 24|80<<16) // rows, cols
	str(t+lTerminalInfo.Offs[2], "xterm")
	b[o[15]], b[o[15]+optBool.Payload] = 1, 1
	b[o[16]] = 1
	abi.PutU64(b, o[16]+optU64.Payload, 1234)
	b[o[17]], b[o[17]+optExitReason.Payload] = 1, 4 // idle
	return b
}

// TestLiftInfo lifts 1.2.0's four fields, and a bad discriminant in any
// of them fails the lift naming that field.
func TestLiftInfo(t *testing.T) {
	s := &abi.Scope{}
	defer s.Free()
	b := hostInfo(s)
	l := abi.Lifter{M: s}
	in := liftInfo(&l, b, 0)
	if l.Err != nil || in.Terminal == nil || *in.Terminal != (TerminalInfo{24, 80, "xterm"}) || !*in.WaitingForInput ||
		*in.ReapInMS != 1234 || in.ReapRule == nil || *in.ReapRule != 4 || len(in.ID) != 52 {
		t.Fatalf("lifted %+v (terminal %+v), err %v", in, in.Terminal, l.Err)
	}
	o := lInfo.Offs
	for _, tc := range []struct {
		at   uint32
		v    byte
		want string
	}{
		{o[14], 2, "process-info.terminal"},
		{o[15], 3, "process-info.waiting-for-input"},
		{o[16], 9, "process-info.reap-in-ms"},
		{o[17], 2, "process-info.reap-rule"},
		{o[17] + optExitReason.Payload, 7, "process-info.reap-rule"},
	} {
		bad := append([]byte(nil), b...)
		bad[tc.at] = tc.v
		l := abi.Lifter{M: s}
		in := liftInfo(&l, bad, 0)
		if l.Err == nil || !strings.Contains(l.Err.Error(), tc.want+":") || in.ReapInMS != nil {
			t.Errorf("byte %d = %d: err %v, ReapInMS %v: want a failure naming %s", tc.at, tc.v, l.Err, in.ReapInMS, tc.want)
		}
	}
}
