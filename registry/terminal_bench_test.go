package registry

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/terminal"
)

// go test -run '^$' -bench KeystrokeToScreen -benchtime 200x ./registry/
//
// BenchmarkKeystrokeToScreen is a key sent to cat on a terminal until a
// snapshot shows its echo (the cursor moved; x and BSpace alternate, so
// the line never wraps): through the registry (in process, as a host
// call does), and through tmux's CLI (send-keys, then display-message for
// the cursor until it moved), in one run.
func BenchmarkKeystrokeToScreen(b *testing.B) {
	b.Run("registry", func(b *testing.B) {
		e, ctx := termEnv(b)
		id := e.spawnTerm(ctx, 24, 80, "/bin/cat")
		defer e.r.Signal(ctx, id, SigKill)
		prev := e.awaitScreen(ctx, id, "cat", func(Screen) bool { return true }).Cursor
		keys := [][]terminal.Key{{{Text: "x"}}, {{Name: "BSpace"}}}
		for i := 0; b.Loop(); i++ {
			if _, err := e.r.SendKeys(ctx, id, keys[i%2]); err != nil {
				b.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				s, err := e.r.Snapshot(ctx, id, 0)
				if err != nil {
					b.Fatal(err)
				}
				if s.Cursor != prev {
					prev = s.Cursor
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("no echo: cursor %+v, screen %q", s.Cursor, s.Text())
				}
			}
		}
	})
	b.Run("tmux", func(b *testing.B) {
		tmux, err := exec.LookPath("tmux")
		if err != nil {
			b.Skip("tmux not installed")
		}
		sock := filepath.Join(b.TempDir(), "sock")
		run := func(args ...string) string {
			out, err := exec.Command(tmux, append([]string{"-S", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
			if err != nil {
				b.Fatalf("tmux %v: %v: %s", args, err, out)
			}
			return string(out)
		}
		run("new-session", "-d", "-x", "80", "-y", "24", "/bin/cat")
		defer exec.Command(tmux, "-S", sock, "kill-server").Run()
		cursor := func() string { return run("display-message", "-p", "#{cursor_x} #{cursor_y}") }
		prev := cursor()
		keys := [][]string{{"-l", "x"}, {"BSpace"}}
		for i := 0; b.Loop(); i++ {
			run(append([]string{"send-keys"}, keys[i%2]...)...)
			deadline := time.Now().Add(10 * time.Second)
			for {
				if c := cursor(); c != prev {
					prev = c
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("no echo")
				}
			}
		}
	})
}
