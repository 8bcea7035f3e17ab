package registry

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry/journal"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// A journaled process whose backend name has since got a persistent
// (keeper) twin is still adopted through the ordinary backend of that
// name, as after an upgrade that moved OCI containers into a keeper: the
// first daemon's backend "local" is keeper A with no persistent twin; the
// next one's persistent "local" is keeper B, which does not hold it. The
// process must come back running and owned, not read as lost while it
// runs on.
func TestAdoptFallsBackToTheOrdinaryBackend(t *testing.T) {
	dir, keys := durableDir(t, "regfallback-")
	jpath := filepath.Join(dir, "journal.db")
	newKeeper := func(name string) *keeper.Backend {
		d := filepath.Join(dir, name)
		os.Mkdir(d, 0o700)
		kb, err := keeper.NewBackend(keeper.Config{Dir: d, Name: "local"})
		if err != nil {
			t.Fatal(err)
		}
		return kb
	}
	ka, kb := newKeeper("a"), newKeeper("b")
	dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer func() { ka.Close(dctx, true); kb.Close(dctx, true) }()
	daemon := func(mut func(c *Config)) (*env, *journal.Journal) {
		jr, _, err := journal.Open(jpath, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, func(c *Config) {
			c.Journal, c.Keys = jr, keys
			mut(c)
		})
		return e, jr
	}
	ctx := as("cap", "alice")
	e1, jr1 := daemon(func(c *Config) { c.Backends["local"] = ka })
	id := e1.spawn(ctx, "sleep 60", PersistOptions{})
	if err := e1.r.Detach(dctx); err != nil {
		t.Fatal(err)
	}
	jr1.Close()

	e2, jr2 := daemon(func(c *Config) {
		c.Backends["local"] = ka
		c.Persistent = map[string]sandbox.Backend{"local": kb}
	})
	defer jr2.Close()
	rep, err := e2.r.Adopt(dctx)
	if err != nil || rep.Running != 1 || rep.Lost != 0 {
		t.Fatalf("adopt: %+v %v, want it running through keeper A", rep, err)
	}
	if err := e2.r.Signal(ctx, id, SigKill); err != nil {
		t.Fatalf("signal the adopted process: %v", err)
	}
	if ex := e2.wait(ctx, id); ex.Signal == nil || *ex.Signal != 9 {
		t.Fatalf("exit %+v, want signal 9", ex)
	}
}
