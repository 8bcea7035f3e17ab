//go:build !leanclient

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
)

// go test -run '^$' -bench KeystrokeCLIVsTmux -benchtime 2x ./cmd/capsule-host
//
// BenchmarkKeystrokeCLIVsTmux is a keystroke until a screen shows its echo,
// both through their CLIs as a user or a script drives them: `capsule-host
// send ID x` then `capsule-host screen ID` until the first row reads "x",
// against `tmux send-keys -l x` then `tmux capture-pane -p` until the same
// (cat on a terminal at 80×24 on both; x and BSpace alternate, so the row
// goes "x", "", "x"...). The capsule-host side runs twice: the full binary
// and the lean client build. Sides are interleaved, 10 keystrokes each per
// iteration, so load hits them alike. It reports each side's median and
// the ratio of the medians (the goal: keystroke/tmux < 1) and how
// many screen reads a keystroke took (the screen lags the key by the
// program's echo and the feeder).
func BenchmarkKeystrokeCLIVsTmux(b *testing.B) {
	if _, err := exec.LookPath("tmux"); err != nil {
		b.Skip("SKIP: tmux is not installed, so the keystroke cannot be compared with it (apt-get install tmux)")
	}
	r := newClientBench(b, false)
	ours, lean := r.startCat(), r.startCat() // one each: each side alternates its own row
	if err := r.tmux("new-session", "-d", "-s", "term", "-x", "80", "-y", "24", "exec cat")(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.tmux("kill-server")() })
	bin := func(path, id string) keystrokeSide {
		return keystrokeSide{
			send:   func(k []string) []string { return append([]string{path, "send", id}, append(k, "--socket", r.sock)...) },
			screen: []string{path, "screen", id, "--socket", r.sock},
		}
	}
	tmuxArgs := []string{"tmux", "-S", r.tmuxSock, "-f", "/dev/null"}
	sides := []struct {
		name string
		keystrokeSide
	}{
		{"capsule-host", bin(r.bin, ours)},
		{"lean", bin(r.leanBin, lean)},
		{"tmux", keystrokeSide{
			send:   func(k []string) []string { return append(append(tmuxArgs, "send-keys", "-t", "term"), k...) },
			screen: append(tmuxArgs, "capture-pane", "-p", "-t", "term"),
		}},
	}
	times := make([][]time.Duration, len(sides))
	reads := make([]int, len(sides))
	for b.Loop() {
		for i := range 10 {
			for k := range sides {
				j := (k + i) % len(sides)
				start := time.Now()
				n, err := sides[j].stroke(r, i%2 == 0)
				if err != nil {
					b.Fatalf("%s: %v", sides[j].name, err)
				}
				times[j] = append(times[j], time.Since(start))
				reads[j] += n
			}
		}
	}
	med := map[string]float64{}
	for j, s := range sides {
		m, iqr := medianIQR(times[j])
		med[s.name] = m
		b.ReportMetric(m, s.name+"-ms")
		b.ReportMetric(iqr, s.name+"-iqr-ms")
		b.ReportMetric(float64(reads[j])/float64(len(times[j])), s.name+"-reads/key")
	}
	b.ReportMetric(med["capsule-host"]/med["tmux"], "keystroke/tmux")
	b.ReportMetric(med["lean"]/med["tmux"], "lean-keystroke/tmux")
}

// startCat starts cat on a terminal through the shell capsule.
func (r *clientBench) startCat() string {
	res, err := r.c.Call(context.Background(), api.CallRequest{Capsule: "shell", Tool: "start_terminal",
		Input: json.RawMessage(`{"command":"exec cat","settle_ms":0}`), Principal: "bench"})
	if err != nil {
		r.b.Fatal(err)
	}
	var term struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Output, &term); err != nil || term.ID == "" {
		r.b.Fatalf("start_terminal answered %s (%v)", res.Output, err)
	}
	return term.ID
}

// keystrokeSide is one CLI's way to send a key and read the screen.
type keystrokeSide struct {
	send   func(keys []string) []string
	screen []string
}

// stroke sends x (type) or BSpace, then reads the screen until its first
// row shows the echo; it returns how many reads that took.
func (s keystrokeSide) stroke(r *clientBench, typeX bool) (int, error) {
	key, want := []string{"BSpace"}, ""
	if typeX {
		key, want = []string{"-l", "x"}, "x"
	}
	if _, err := r.output(s.send(key)); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for n := 1; ; n++ {
		out, err := r.output(s.screen)
		if err != nil {
			return n, err
		}
		if first, _, _ := strings.Cut(out, "\n"); strings.TrimRight(first, " ") == want {
			return n, nil
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("no echo %q within 20s: screen %q", want, out)
		}
	}
}

// output runs argv once and returns its stdout.
func (r *clientBench) output(argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %w: %s", argv, err, errOut.Bytes())
	}
	return out.String(), nil
}
