package client

import "testing"

func TestExitText(t *testing.T) {
	code, sig := int32(3), int32(15)
	for _, tc := range []struct {
		e    *Exit
		want string
	}{
		{nil, "-"},
		{&Exit{}, "-"},
		{&Exit{ExitCode: &code}, "exit 3"},
		{&Exit{Signal: &sig}, "signal 15"},
		{&Exit{ExitCode: &code, Signal: &sig}, "signal 15"}, // a signal wins
	} {
		if got := ExitText(tc.e); got != tc.want {
			t.Errorf("ExitText(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}
