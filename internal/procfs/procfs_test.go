package procfs

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestParseStat(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 12345 0"
	tests := []struct {
		name string
		line string
		want Stat
		err  bool
	}{
		{"plain", "42 (sh) S 1 42 42" + tail, Stat{PID: 42, Comm: "sh", State: 'S', PPID: 1, PGID: 42, SID: 42, Start: 12345}, false},
		{"comm with spaces and parens", "7 (a) b (c)) Z 3 4 5" + tail, Stat{PID: 7, Comm: "a) b (c)", State: 'Z', PPID: 3, PGID: 4, SID: 5, Start: 12345}, false},
		{"empty", "", Stat{}, true},
		{"no parens", "42 sh S 1 42 42" + tail, Stat{}, true},
		{"short", "42 (sh) S 1 42 42 0", Stat{}, true},
		{"bad pid", "x (sh) S 1 42 42" + tail, Stat{}, true},
		{"bad ppid", "42 (sh) S y 42 42" + tail, Stat{}, true},
		{"two-letter state", "42 (sh) SS 1 42 42" + tail, Stat{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.line))
			if tc.err {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestReadStatSelfAndGone(t *testing.T) {
	s, err := ReadStat(os.Getpid())
	if err != nil || s.PID != os.Getpid() || s.PPID != os.Getppid() || s.Start == 0 || s.Zombie() {
		t.Fatalf("self: %+v, %v", s, err)
	}
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStat(cmd.Process.Pid); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reaped pid: err = %v, want ErrNotExist", err)
	}
	if StartTime(cmd.Process.Pid) != 0 {
		t.Fatal("StartTime of a gone pid is not 0")
	}
	pids, err := PIDs()
	if err != nil || len(pids) == 0 {
		t.Fatalf("PIDs: %v, %v", pids, err)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (sh) S 1 42 42 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 12345 0"))
	f.Add([]byte("1 ((() R 0 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseStat(b)
		if err == nil && (s.PID <= 0 || s.State == 0) {
			t.Fatalf("accepted %q as %+v", b, s)
		}
	})
}
