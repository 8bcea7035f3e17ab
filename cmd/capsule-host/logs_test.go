//go:build !leanclient

package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// stampedLine is one line of `logs --timestamps`: its capture time and text.
type stampedLine struct {
	t    time.Time
	text string
}

// parseStamped splits `logs --timestamps` output; every line must carry
// a time (none of these bytes predate a keeper restart).
func parseStamped(t *testing.T, out string) []stampedLine {
	t.Helper()
	var ls []stampedLine
	for _, l := range strings.SplitAfter(out, "\n") {
		if l == "" {
			continue
		}
		stamp, text, ok := strings.Cut(l, " ")
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if !ok || err != nil {
			t.Fatalf("line %q has no capture time (%v)", l, err)
		}
		ls = append(ls, stampedLine{ts, strings.TrimLeft(text, " ")})
	}
	return ls
}

func texts(ls []stampedLine) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.text)
	}
	return b.String()
}

// spawnGated starts, as alice through testcap, a process that writes an
// "old" group of lines on both streams, waits for a line on its stdin,
// writes a "new" group and exits; the last stdout line is unfinished.
// It returns once the process exited: the two groups were captured
// strictly apart (the test saw the old group before it opened the gate).
func (d *testDaemon) spawnGated(t *testing.T) string {
	t.Helper()
	in, _ := json.Marshal(map[string]any{
		"request": map[string]any{"cmd": "/bin/sh", "args": []string{"-c",
			`echo o1; echo e1 >&2; echo o2; read x; echo o3; echo e2 >&2; printf 'o4 no newline'`}},
		"options": map[string]any{"label": "gated", "keep_stdin_open": true},
	})
	out, errOut, code := d.cli(t, "call", "testcap", "spawn_persistent", string(in), "--principal", "alice", "--json")
	var v struct {
		Output struct {
			OK string `json:"ok"`
		} `json:"output"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Output.OK == "" {
		t.Fatalf("spawn: exit %d: %s %s", code, out, errOut)
	}
	id := v.Output.OK
	waitFor(t, func() bool {
		o, _, _ := d.cli(t, "logs", id)
		e, _, _ := d.cli(t, "logs", id, "--stderr")
		return o == "o1\no2\n" && e == "e1\n"
	})
	gate, _ := json.Marshal(map[string]any{"id": id, "data": "go\n"})
	if _, errOut, code := d.cli(t, "call", "testcap", "write_stdin", string(gate), "--principal", "alice"); code != 0 {
		t.Fatalf("write_stdin: exit %d: %s", code, errOut)
	}
	if out, errOut, code := d.cli(t, "wait", id, "--timeout", "20s"); code != 0 || !strings.HasPrefix(out, "exited") {
		t.Fatalf("wait: exit %d: %q %s", code, out, errOut)
	}
	return id
}

// TestLogsLineFlags runs `logs` with --tail, --since, --timestamps and
// --merged against a real daemon and a real process, and each bad
// combination: exit 2 naming the flag.
func TestLogsLineFlags(t *testing.T) {
	d := startDaemon(t, nil)
	id := d.spawnGated(t)
	out, errOut, code := d.cli(t, "logs", id, "--merged", "--timestamps")
	if code != 0 {
		t.Fatalf("--merged --timestamps: exit %d: %s", code, errOut)
	}
	merged := parseStamped(t, out)
	if len(merged) != 6 {
		t.Fatalf("--merged: %d lines, want 6:\n%s", len(merged), out)
	}
	if !slices.IsSortedFunc(merged, func(a, b stampedLine) int { return a.t.Compare(b.t) }) {
		t.Errorf("--merged is not in capture order:\n%s", out)
	}
	oldGroup, newGroup := texts(merged[:3]), texts(merged[3:])
	for _, want := range []string{"o1\n", "o2\n", "e1\n"} {
		if !strings.Contains(oldGroup, want) {
			t.Errorf("the first three merged lines %q lack %q (captured before the gate)", oldGroup, want)
		}
	}
	if !strings.Contains(oldGroup, "o1\no2\n") && !strings.Contains(oldGroup, "o1\ne1\no2\n") {
		t.Errorf("stdout's own order is lost in %q", oldGroup)
	}
	// o4 has no newline: it ends the output, or it gets one before e2
	// (two streams' lines never share a line).
	if !strings.HasSuffix(newGroup, "o4 no newline") && !strings.HasSuffix(newGroup, "o4 no newline\ne2\n") {
		t.Errorf("the new group %q: want o4 unfinished and last, or ended before e2", newGroup)
	}
	since := merged[3].t.Format(time.RFC3339Nano) // the first capture after the gate
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"tail", []string{"--tail", "2"}, "o3\no4 no newline"},
		{"tail 0", []string{"--tail", "0"}, ""},
		{"tail past the start", []string{"--tail", "100"}, "o1\no2\no3\no4 no newline"},
		{"tail stderr", []string{"--tail", "1", "--stderr"}, "e2\n"},
		{"tail merged", []string{"--tail", "3", "--merged"}, newGroup},
		{"since duration", []string{"--since", "1h"}, "o1\no2\no3\no4 no newline"},
		{"since time", []string{"--since", since}, "o3\no4 no newline"},
		{"since time merged", []string{"--since", since, "--merged"}, newGroup},
		{"since and tail", []string{"--since", since, "--merged", "--tail", "1"}, texts(merged[5:])},
		{"merged", []string{"--merged"}, texts(merged)},
		{"tail follows an ended process", []string{"--tail", "1", "-f"}, "o4 no newline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := d.cli(t, append([]string{"logs", id}, tc.args...)...)
			if code != 0 || out != tc.want {
				t.Errorf("logs %v: exit %d, %q (stderr %q); want %q", tc.args, code, out, errOut, tc.want)
			}
		})
	}
	t.Run("timestamps", func(t *testing.T) {
		out, _, _ := d.cli(t, "logs", id, "--timestamps")
		ls := parseStamped(t, out)
		if texts(ls) != "o1\no2\no3\no4 no newline" || !ls[0].t.Before(ls[2].t) {
			t.Errorf("--timestamps: %q", out)
		}
		if ls[0].t.Before(time.Now().Add(-time.Hour)) || ls[3].t.After(time.Now()) {
			t.Errorf("capture times %v..%v are not around now", ls[0].t, ls[3].t)
		}
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tail", "-1"}, "--tail"},
		{[]string{"--tail", "ten"}, "--tail"},
		{[]string{"--since", "0s"}, "--since"},
		{[]string{"--since", "-5m"}, "--since"},
		{[]string{"--since", "yesterday"}, "--since"},
		{[]string{"--since", "2026-13-01T00:00:00Z"}, "--since"},
		{[]string{"--tail", "1", "--max", "10"}, "--max"},
		{[]string{"--merged", "--stderr"}, "--stderr"},
		{[]string{"--merged", "--cursor", "x"}, "--cursor"},
		{[]string{"--timestamps", "--json"}, "--json"},
	} {
		t.Run("refuses "+strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := d.cli(t, append([]string{"logs", id}, tc.args...)...)
			if code != 2 || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("logs %v: exit %d, stdout %q, stderr %q; want exit 2 naming %s", tc.args, code, out, errOut, tc.want)
			}
		})
	}
}

// cliResult is one CLI run's output and exit code.
type cliResult struct {
	out, errOut string
	code        int
}

// cliAsync runs the CLI on a goroutine of its own (a follow, which ends
// with the process).
func (d *testDaemon) cliAsync(t *testing.T, args ...string) <-chan cliResult {
	done := make(chan cliResult, 1)
	go func() {
		o, e, c := d.cli(t, args...)
		done <- cliResult{o, e, c}
	}()
	return done
}

// `logs --merged --timestamps -f` on a live process follows both streams
// with whole, timed lines until the process is stopped.
func TestLogsMergedFollow(t *testing.T) {
	d := startDaemon(t, nil)
	id := d.spawnTicker(t, "alice")
	done := d.cliAsync(t, "logs", id, "--merged", "--timestamps", "-f")
	waitFor(t, func() bool {
		o, _, _ := d.cli(t, "logs", id, "--stderr")
		return strings.Contains(o, "err 3\n")
	})
	if _, errOut, code := d.cli(t, "stop", id, "--grace", "1s"); code != 0 {
		t.Fatalf("stop: %s", errOut)
	}
	select {
	case r := <-done:
		ls := parseStamped(t, r.out)
		all := texts(ls)
		if r.code != 0 || !strings.Contains(all, "tick 3\n") || !strings.Contains(all, "err 3\n") {
			t.Fatalf("follow: exit %d %q %q", r.code, r.out, r.errOut)
		}
		for _, l := range ls {
			if !strings.HasSuffix(l.text, "\n") || strings.Count(l.text, "\n") != 1 {
				t.Errorf("follow printed a partial or joined line %q", l.text)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs -f did not end after the process was stopped")
	}
}
