//go:build !leanclient

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// go test -run '^$' -bench KeystrokeCLIVsTmux -benchtime 2x ./cmd/capsule-host
//
// BenchmarkKeystrokeCLIVsTmux is a keystroke until a screen shows its echo,
// both through their CLIs as a user or a script drives them: `capsule-host
// send ID x` then `capsule-host screen ID` until the first row reads "x",
// against `tmux send-keys -l x` then `tmux capture-pane -p` until the same
// (cat on a terminal at 80×24 on both; x and BSpace alternate, so the row
// goes "x", "", "x"...). The capsule-host side runs twice: the full binary
// and the lean client build; "send-screen" is the lean client's one exec
// for both, `capsule-host send ID x --screen` (the daemon answers the
// screen once the echo rendered; a later `screen` only if that screen
// lacks it); "api" is the same two requests from an in-process client (the
// daemon's share). Sides are interleaved, 10 keystrokes each per
// iteration, so load hits them alike. It reports each side's median and
// the ratio of the medians (the goal: keystroke/tmux < 1) and how
// many screen reads a keystroke took (the screen lags the key by the
// program's echo and the feeder).
func BenchmarkKeystrokeCLIVsTmux(b *testing.B) {
	if _, err := exec.LookPath("tmux"); err != nil {
		b.Skip("SKIP: tmux is not installed, so the keystroke cannot be compared with it (apt-get install tmux)")
	}
	r := newClientBench(b, false)
	ours, lean, one := r.startCat(), r.startCat(), r.startCat() // one each: each side alternates its own row
	if err := r.tmux("new-session", "-d", "-s", "term", "-x", "80", "-y", "24", "exec cat")(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.tmux("kill-server")() })
	cli := func(send func(k []string) []string, screen []string) *keystrokeSide {
		return &keystrokeSide{
			send:   func(k []string) error { _, err := r.output(send(k)); return err },
			screen: func() (string, error) { return r.output(screen) },
		}
	}
	bin := func(path, id string) *keystrokeSide {
		return cli(func(k []string) []string { return append([]string{path, "send", id}, append(k, "--socket", r.sock)...) },
			[]string{path, "screen", id, "--socket", r.sock})
	}
	tmuxArgs := []string{"tmux", "-S", r.tmuxSock, "-f", "/dev/null"}
	apiID := r.startCat()
	ks := []*keystrokeSide{bin(r.bin, ours), bin(r.leanBin, lean),
		cli(func(k []string) []string { return append(append(tmuxArgs, "send-keys", "-t", "term"), k...) },
			append(tmuxArgs, "capture-pane", "-p", "-t", "term")),
		// The daemon's share: the same requests from an in-process client.
		{send: func(k []string) error {
			key := api.Key{Name: k[0]}
			if k[0] == "-l" {
				key = api.Key{Text: k[1]}
			}
			_, err := r.c.Input(context.Background(), apiID, api.InputRequest{Keys: []api.Key{key}})
			return err
		}, screen: func() (string, error) {
			s, err := r.c.Screen(context.Background(), apiID, 0)
			return strings.Join(s.Lines, "\n"), err
		}},
	}
	ss := bin(r.leanBin, one)
	ss.sendScreen = func(k []string) (string, error) {
		return r.output(append([]string{r.leanBin, "send", one}, append(k, "--screen", "--socket", r.sock)...))
	}
	ks = append(ks, ss)
	sides := []testutil.Side{{Name: "capsule-host", Run: ks[0].stroke}, {Name: "lean", Run: ks[1].stroke}, {Name: "tmux", Run: ks[2].stroke}, {Name: "api", Run: ks[3].stroke},
		{Name: "send-screen", Run: ks[4].stroke}}
	times := testutil.Interleave(b, sides, 10)
	med := testutil.ReportSides(b, "ms", sides, times)
	for j, s := range sides {
		b.ReportMetric(float64(ks[j].reads)/float64(len(times[j])), s.Name+"-reads/key")
	}
	b.ReportMetric(med["capsule-host"]/med["tmux"], "keystroke/tmux")
	b.ReportMetric(med["lean"]/med["tmux"], "lean-keystroke/tmux")
	b.ReportMetric(med["send-screen"]/med["tmux"], "send-screen/tmux")
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
	send   func(keys []string) error // tmux's words: -l x, or a key name
	screen func() (string, error)
	// sendScreen, when set, sends and prints the screen in one command
	// (send --screen); screen is then read only if that lacks the echo.
	sendScreen func(keys []string) (string, error)
	typed      bool // the row shows "x": the next key is BSpace
	reads      int  // screen reads so far
}

// stroke sends x or BSpace (alternately), then reads the screen until its
// first row shows the echo.
func (s *keystrokeSide) stroke() error {
	key, want := []string{"-l", "x"}, "x"
	if s.typed {
		key, want = []string{"BSpace"}, ""
	}
	s.typed = !s.typed
	shows := func(out string) bool {
		first, _, _ := strings.Cut(out, "\n")
		return strings.TrimRight(first, " ") == want
	}
	if s.sendScreen != nil {
		out, err := s.sendScreen(key)
		s.reads++
		if err != nil || shows(out) {
			return err
		}
	} else if err := s.send(key); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := s.screen()
		s.reads++
		if err != nil {
			return err
		}
		if shows(out) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no echo %q within 20s: screen %q", want, out)
		}
	}
}
