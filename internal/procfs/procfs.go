// Package procfs reads the few /proc facts the backends decide on: a
// process's state, parent, group, session and start time. It is the one
// parser of /proc/<pid>/stat in the tree; a pid plus its start time names
// one process for good, so a reused pid is never mistaken for ours.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Stat is what the backends need from /proc/<pid>/stat.
type Stat struct {
	PID   int
	Comm  string // without the parentheses
	State byte   // 'R', 'S', 'D', 'Z', ...
	PPID  int
	PGID  int
	SID   int
	// Start is the start time in clock ticks since boot (field 22).
	Start uint64
}

// Zombie reports whether the process has exited and awaits its reaper.
func (s Stat) Zombie() bool { return s.State == 'Z' }

// ErrMalformed is returned for a stat line that does not parse.
var ErrMalformed = errors.New("procfs: malformed stat line")

// ReadStat reads /proc/<pid>/stat. A process that is gone gives an error
// satisfying errors.Is(err, os.ErrNotExist).
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	s, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return s, nil
}

// StartTime is ReadStat(pid).Start, or 0 if the process is gone or
// unreadable.
func StartTime(pid int) uint64 {
	s, err := ReadStat(pid)
	if err != nil {
		return 0
	}
	return s.Start
}

// ParseStat parses one /proc/<pid>/stat line. comm may hold spaces and
// parentheses, so the fields are split after the last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return Stat{}, ErrMalformed
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid <= 0 {
		return Stat{}, ErrMalformed
	}
	f := bytes.Fields(b[end+1:])
	// f[0]=state(3) f[1]=ppid(4) f[2]=pgrp(5) f[3]=session(6) ... f[19]=starttime(22)
	// The state is one letter (R, S, D, Z, T, t, X, I, ...); a NUL or a
	// digit there means the line is not a stat line (FuzzParseStat).
	if len(f) < 20 || len(f[0]) != 1 || !isLetter(f[0][0]) {
		return Stat{}, ErrMalformed
	}
	s := Stat{PID: pid, Comm: string(b[open+1 : end]), State: f[0][0]}
	var e1, e2, e3, e4 error
	s.PPID, e1 = strconv.Atoi(string(f[1]))
	s.PGID, e2 = strconv.Atoi(string(f[2]))
	s.SID, e3 = strconv.Atoi(string(f[3]))
	s.Start, e4 = strconv.ParseUint(string(f[19]), 10, 64)
	if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
		return Stat{}, ErrMalformed
	}
	return s, nil
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// PIDs lists the numeric entries of /proc.
func PIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}
