package registry

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/terminal"
)

var termExec = append(append([]string{"/bin/bash", "/bin/busybox"}, testExec...), pythonExec()...)

func pythonExec() []string {
	if python3 == "" {
		return nil
	}
	return []string{python3}
}

// python3 is the REPL the terminal tests drive, found on PATH as `make
// deps` checks it (command -v python3), so a python3 outside /usr/bin is
// used rather than skipped. "" when there is none.
var python3, _ = exec.LookPath("python3")

// needPython3 skips, loudly, when PATH has no python3 (make deps installs it).
func needPython3(t *testing.T) {
	t.Helper()
	if python3 == "" {
		t.Skip("SKIP LOUDLY: no python3 on PATH (make deps installs it)")
	}
}

// termEnv is an env whose capsule "term" may run bash and busybox.
func termEnv(t testing.TB) (*env, context.Context) {
	e := newEnv(t, nil)
	e.register("term", func(p *CapsulePolicy) { p.Exec = termExec })
	return e, as("term", "alice")
}

func (e *env) spawnTerm(ctx context.Context, rows, cols uint16, cmd string, args ...string) string {
	e.t.Helper()
	req := SpawnRequest{Cmd: cmd, Args: args, Env: []EnvVar{{markerKey, e.marker}}}
	id, err := e.r.SpawnPersistent(ctx, req, PersistOptions{Terminal: &TerminalOptions{Rows: rows, Cols: cols}})
	if err != nil {
		e.t.Fatalf("spawn terminal %s: %v", cmd, err)
	}
	return id
}

// awaitScreen polls the snapshot until ok holds, bounded.
func (e *env) awaitScreen(ctx context.Context, id, what string, ok func(Screen) bool) Screen {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := e.r.Snapshot(ctx, id, 100)
		if err != nil {
			e.t.Fatalf("snapshot: %v", err)
		}
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("screen never showed %s:\n%s", what, s.Text())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func shows(sub string) func(Screen) bool {
	return func(s Screen) bool { return strings.Contains(s.Text(), sub) }
}

func keys(names ...string) []terminal.Key {
	out := make([]terminal.Key, len(names))
	for i, n := range names {
		out[i] = terminal.Key{Name: n}
	}
	return out
}

// bash on a terminal driven through the registry: a pasted 3-line script
// runs once as one unit (bash turns bracketed paste on), Up recalls
// history, C-c interrupts, a resize is what stty sees and what the
// snapshot has.
func TestTerminalBashDriven(t *testing.T) {
	e, ctx := termEnv(t)
	id := e.spawnTerm(ctx, 24, 80, "/bin/bash", "--norc", "--noprofile", "-i")
	defer e.r.Signal(ctx, id, SigKill)
	if _, err := e.r.Paste(ctx, id, []byte("PS1='$ '; HISTFILE=/dev/null"), true); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "the prompt", func(s Screen) bool { return s.Modes.BracketedPaste && strings.HasSuffix(s.Text(), "$") })
	if _, err := e.r.Paste(ctx, id, []byte("n=0\nn=$((n+1)); echo run$n\necho done$n"), true); err != nil {
		t.Fatal(err)
	}
	s := e.awaitScreen(ctx, id, "done1", shows("done1"))
	if strings.Count(s.Text(), "run1") != 1 || strings.Contains(s.Text(), "run2") {
		t.Errorf("the pasted script did not run exactly once:\n%s", s.Text())
	}
	if _, err := e.r.SendKeys(ctx, id, []terminal.Key{{Text: "echo hist''ory"}, {Name: "Enter"}}); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "history", shows("\nhistory"))
	if _, err := e.r.SendKeys(ctx, id, keys("Up", "Enter")); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "history twice", func(s Screen) bool { return strings.Count(s.Text(), "\nhistory") == 2 })
	if err := e.r.Resize(ctx, id, 30, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Paste(ctx, id, []byte("clear; stty size"), true); err != nil {
		t.Fatal(err)
	}
	s = e.awaitScreen(ctx, id, "30 100", shows("30 100"))
	if s.Rows != 30 || s.Cols != 100 {
		t.Errorf("snapshot size %dx%d, want 30x100", s.Rows, s.Cols)
	}
	if _, err := e.r.Paste(ctx, id, []byte("sh -c 'echo start''ed; exec sleep 100'"), true); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "started", shows("started"))
	if _, err := e.r.SendKeys(ctx, id, keys("C-c")); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "^C", shows("^C"))
	if _, err := e.r.Paste(ctx, id, []byte("exit $?"), true); err != nil {
		t.Fatal(err)
	}
	if ex := e.wait(ctx, id); ex.Code == nil || *ex.Code != 130 {
		t.Errorf("exit %+v, want code 130 (the interrupted sleep)", ex)
	}
}

// python3's REPL on a terminal: it sees a tty (no -i, no -u needed), its
// prompt shows, a pasted block runs, Up recalls its history (readline).
func TestTerminalPythonREPL(t *testing.T) {
	needPython3(t)
	e, ctx := termEnv(t)
	id := e.spawnTerm(ctx, 24, 80, python3, "-q")
	defer e.r.Signal(ctx, id, SigKill)
	e.awaitScreen(ctx, id, "the >>> prompt", func(s Screen) bool { return strings.HasSuffix(s.Text(), ">>>") })
	if _, err := e.r.Paste(ctx, id, []byte("import sys; print('tty', sys.stdin.isatty(), 6*7)"), true); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "the answer", shows("tty True 42"))
	if _, err := e.r.SendKeys(ctx, id, keys("Up", "Enter")); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "the answer twice", func(s Screen) bool { return strings.Count(s.Text(), "tty True 42") == 2 })
	if _, err := e.r.SendKeys(ctx, id, keys("C-d")); err != nil {
		t.Fatal(err)
	}
	if ex := e.wait(ctx, id); ex.Code == nil || *ex.Code != 0 {
		t.Errorf("exit %+v, want 0 after C-d", ex)
	}
}

// A program that asks the terminal where its cursor is (CPR, CSI 6n)
// gets the emulator's answer on its input, as from a real terminal.
func TestTerminalAnswersQueries(t *testing.T) {
	e, ctx := termEnv(t)
	id := e.spawnTerm(ctx, 24, 80, "/bin/sh", "-c",
		`stty raw -echo; printf 'abc\033[6n'; r=$(dd bs=1 count=6 2>/dev/null); stty sane; echo; printf '%s' "$r" | od -An -tx1; exec sleep 100`)
	defer e.r.Signal(ctx, id, SigKill)
	e.awaitScreen(ctx, id, "the answer to CSI 6n (row 1, col 4)", shows("1b 5b 31 3b 34 52"))
}

// A full-screen program: the alternate screen is flagged and shows the
// program; after it exits the primary screen is back.
func TestTerminalFullScreen(t *testing.T) {
	e, ctx := termEnv(t)
	id := e.spawnTerm(ctx, 24, 80, "/bin/sh", "-c", "echo primary-text; /bin/busybox vi; echo after-vi; exec sleep 100")
	defer e.r.Signal(ctx, id, SigKill)
	e.awaitScreen(ctx, id, "vi on the alternate screen", func(s Screen) bool {
		return s.AltScreen && !strings.Contains(s.Text(), "primary-text") && strings.Contains(s.Text(), "~")
	})
	if _, err := e.r.SendKeys(ctx, id, []terminal.Key{{Text: ":q!"}, {Name: "Enter"}}); err != nil {
		t.Fatal(err)
	}
	e.awaitScreen(ctx, id, "the primary screen back", func(s Screen) bool {
		return !s.AltScreen && strings.Contains(s.Text(), "primary-text") && strings.Contains(s.Text(), "after-vi")
	})
}

func TestTerminalBadInput(t *testing.T) {
	e, ctx := termEnv(t)
	id := e.spawnTerm(ctx, 24, 80, "/bin/cat")
	defer e.r.Signal(ctx, id, SigKill)
	if _, err := e.r.SendKeys(ctx, id, []terminal.Key{{Name: "Enter"}, {Name: "Entr"}}); !isErr(err, ErrInvalidInput) || !strings.Contains(err.Error(), `"Entr"`) {
		t.Errorf("unknown key: %v, want invalid input naming it", err)
	}
	for _, sz := range [][2]uint16{{0, 80}, {1001, 80}, {24, 0}} {
		if err := e.r.Resize(ctx, id, sz[0], sz[1]); !isErr(err, ErrInvalidInput) {
			t.Errorf("resize %v: %v, want invalid input", sz, err)
		}
	}
	big := make([]byte, e.r.cfg.Defaults.StdinWriteMax+1)
	if _, err := e.r.Paste(ctx, id, big, false); !isErr(err, ErrTooLarge) {
		t.Errorf("oversized paste: %v, want too large", err)
	}
	for _, o := range []TerminalOptions{{Rows: 0, Cols: 80}, {Rows: 24, Cols: 1001}, {Rows: 24, Cols: 80, Term: "x/../y"}, {Rows: 24, Cols: 80, Term: strings.Repeat("x", 65)}} {
		if _, err := e.r.SpawnPersistent(ctx, e.sh("true"), PersistOptions{Terminal: &o}); !isErr(err, ErrInvalidInput) {
			t.Errorf("spawn with terminal %+v: %v, want invalid input", o, err)
		}
	}
	pipe := e.spawn(ctx, "sleep 100", PersistOptions{KeepStdinOpen: true})
	defer e.r.Signal(ctx, pipe, SigKill)
	if _, err := e.r.Snapshot(ctx, pipe, 0); !isErr(err, ErrInvalidInput) {
		t.Errorf("snapshot of a pipe process: %v", err)
	}
	if _, err := e.r.SendKeys(ctx, pipe, keys("Enter")); !isErr(err, ErrInvalidInput) {
		t.Errorf("send-keys to a pipe process: %v", err)
	}
	if err := e.r.Resize(ctx, pipe, 10, 10); !isErr(err, ErrInvalidInput) {
		t.Errorf("resize of a pipe process: %v", err)
	}
	for _, submit := range []bool{false, true} {
		if _, err := e.r.Paste(ctx, pipe, []byte("echo hi"), submit); !isErr(err, ErrInvalidInput) {
			t.Errorf("paste (submit %v) to a pipe process: %v, want invalid input", submit, err)
		}
	}
}

// The registry's snapshot of real programs equals tmux's capture-pane
// of the same programs at the same size.
func TestTerminalMatchesTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("SKIP LOUDLY: tmux not installed")
	}
	e, ctx := termEnv(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "tmux.conf")
	os.WriteFile(conf, []byte("set -g status off\n"), 0o600)
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
	// Each program prints, then its shell execs sleep: the screen is final
	// once the pane's foreground command is sleep.
	for name, script := range map[string]string{
		"seq scroll":       "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo line $i; done",
		"ls-like cols":     "printf '%-20s%-20s%-20s\\n' a b c dd ee ff; printf 'tab\\there\\n'",
		"cursor and erase": `printf 'hello world\r\nsecond\033[1;7HWORLD\033[2;1H\033[K\033[5;30Hfar'`,
		"wide and wrap":    `printf '日本語 %s' "$(i=0; while [ $i -lt 30 ]; do i=$((i+1)); printf wrap; done)"`,
	} {
		t.Run(name, func(t *testing.T) {
			full := script + "; exec /bin/sleep 600"
			win := strings.TrimSpace(run("new-window", "-P", "-F", "#{window_id}", "/bin/sh -c '"+strings.ReplaceAll(full, "'", `'\''`)+"'"))
			defer run("kill-window", "-t", win)
			id := e.spawnTerm(ctx, rows, cols, "/bin/sh", "-c", full)
			defer e.r.Signal(ctx, id, SigKill)
			var want string
			deadline := time.Now().Add(20 * time.Second)
			for {
				cmd := strings.TrimSpace(run("display-message", "-p", "-t", win, "#{pane_current_command}"))
				want = strings.TrimRight(run("capture-pane", "-p", "-t", win), "\n")
				if cmd == "sleep" || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			want = trimRight(want)
			e.awaitScreen(ctx, id, "tmux's screen", func(s Screen) bool { return s.Text() == want })
		})
	}
}

func trimRight(s string) string {
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = strings.TrimRight(l, " ")
	}
	return strings.TrimRight(strings.Join(ls, "\n"), "\n")
}
