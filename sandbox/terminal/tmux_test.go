package terminal

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tmuxStreams are byte streams whose rendering tmux and the screen must
// agree on (capture-pane -p, same size).
var tmuxStreams = map[string]string{
	"wrap":         strings.Repeat("0123456789", 25) + "\r\nnext",
	"cursor moves": "abc\x1b[5;10Hmid\x1b[1;1Htop\x1b[10;70Hright",
	"erase":        "line one\r\nline two\r\nline three\x1b[2;3H\x1b[K\x1b[1;1H\x1b[1P",
	"ed":           "aaaa\r\nbbbb\r\ncccc\x1b[2;2H\x1b[J",
	"tabs":         "a\tb\tc\r\n\t\tx",
	"wide":         "日本語テキスト\r\nmixed 漢字 ok",
	"sgr":          "\x1b[1;31mred\x1b[0m plain \x1b[4munder\x1b[0m",
	"scroll":       strings.Repeat("scrolling line\r\n", 40) + "last",
	"region":       "\x1b[3;6r\x1b[6;1H" + strings.Repeat("in region\r\n", 8) + "\x1b[r\x1b[1;1Htop",
	"insert lines": "1\r\n2\r\n3\r\n4\x1b[2;1H\x1b[2L\x1b[5;1H\x1b[M",
	"alt screen":   "primary\x1b[?1049h\x1b[Hfull screen app\x1b[3;3Hbox",
	"alt and back": "primary text\x1b[?1049h\x1b[Halt\x1b[?1049l",
}

func TestScreenMatchesTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux not installed")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g status off\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	run := func(args ...string) string {
		out, err := exec.Command(tmux, append([]string{"-S", sock, "-f", conf}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	const rows, cols = 24, 80
	run("new-session", "-d", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), "sleep 600")
	t.Cleanup(func() { exec.Command(tmux, "-S", sock, "kill-server").Run() })
	for name, stream := range tmuxStreams {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
			if err := os.WriteFile(f, []byte(stream), 0o600); err != nil {
				t.Fatal(err)
			}
			// A fresh window per stream; once cat is done the pane's
			// foreground command is sleep and the screen is final.
			win := strings.TrimSpace(run("new-window", "-P", "-F", "#{window_id}", "cat "+f+"; exec sleep 600"))
			defer run("kill-window", "-t", win)
			s := newScreen(t, rows, cols, 0, nil)
			feed(t, s, stream)
			want := s.Snapshot(0).Text()
			var got string
			deadline := time.Now().Add(10 * time.Second)
			for {
				cmd := strings.TrimSpace(run("display-message", "-p", "-t", win, "#{pane_current_command}"))
				got = strings.TrimRight(run("capture-pane", "-p", "-t", win), "\n")
				if cmd == "sleep" || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			got = strings.TrimRight(strings.Join(trimLines(strings.Split(got, "\n")), "\n"), "\n")
			if got != want {
				t.Errorf("screen differs from tmux\n--- tmux\n%s\n--- screen\n%s", got, want)
			}
		})
	}
}

func trimLines(ls []string) []string {
	for i := range ls {
		ls[i] = strings.TrimRight(ls[i], " ")
	}
	return ls
}
