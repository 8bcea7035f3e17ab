package registry

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// A terminal held by a keeper keeps its screen across a daemon restart:
// the next registry adopts it from the journal, rebuilds the screen at
// the journaled (resized) size from the output log, and the snapshot
// equals the one taken before; the terminal still takes keys.
func TestTerminalSurvivesRestart(t *testing.T) {
	dir, keys := durableDir(t, "regterm-")
	kdir, jpath := filepath.Join(dir, "keeper"), filepath.Join(dir, "journal.db")
	os.Mkdir(kdir, 0o700)
	daemon := func() (*env, *keeper.Backend, *journal.Journal) {
		jr, _, err := journal.Open(jpath, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		kb, err := keeper.NewBackend(keeper.Config{Dir: kdir, Name: "local"})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, func(c *Config) {
			c.Persistent = map[string]sandbox.Backend{"local": kb}
			c.Journal, c.Keys = jr, keys
		})
		e.register("term", func(p *CapsulePolicy) { p.Exec = termExec })
		return e, kb, jr
	}
	ctx := as("term", "alice")
	e1, kb1, jr1 := daemon()
	id := e1.spawnTerm(ctx, 24, 80, "/bin/bash", "--norc", "--noprofile", "-i")
	if _, err := e1.r.Paste(ctx, id, []byte("PS1='$ '; for i in 1 2 3; do echo row$i; done; printf '\\033]0;the title\\007'"), true); err != nil {
		t.Fatal(err)
	}
	if err := e1.r.Resize(ctx, id, 30, 90); err != nil {
		t.Fatal(err)
	}
	if _, err := e1.r.Paste(ctx, id, []byte("stty size"), true); err != nil {
		t.Fatal(err)
	}
	before := e1.awaitScreen(ctx, id, "30 90 and the prompt", func(s Screen) bool {
		return strings.Contains(s.Text(), "30 90\n$") && s.Title == "the title"
	})
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e1.r.Detach(dctx); err != nil {
		t.Fatal(err)
	}
	kb1.Close(dctx, false)
	jr1.Close()

	e2, kb2, jr2 := daemon()
	defer func() {
		e2.r.Signal(ctx, id, SigKill)
		e2.r.Wait(ctx, id, 10*time.Second)
		kb2.Close(dctx, true) // stop_all: nothing of the test outlives it
		jr2.Close()
	}()
	rep, err := e2.r.Adopt(dctx)
	if err != nil || rep.Running != 1 {
		t.Fatalf("adopt: %+v %v, want the terminal running", rep, err)
	}
	after := e2.awaitScreen(ctx, id, "the screen before the restart", func(s Screen) bool {
		return s.Text() == before.Text()
	})
	if after.Rows != 30 || after.Cols != 90 || after.Cursor != before.Cursor || after.Title != before.Title || after.Modes != before.Modes {
		t.Errorf("after the restart %dx%d cursor %+v title %q modes %+v; before %dx%d %+v %q %+v",
			after.Rows, after.Cols, after.Cursor, after.Title, after.Modes, before.Rows, before.Cols, before.Cursor, before.Title, before.Modes)
	}
	if _, err := e2.r.Paste(ctx, id, []byte("exit 9"), true); err != nil {
		t.Fatal(err)
	}
	if ex := e2.wait(ctx, id); ex.Code == nil || *ex.Code != 9 {
		t.Errorf("exit %+v, want 9", ex)
	}
}
