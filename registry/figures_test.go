package registry

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// plainBackend hides a real backend's Snapshot: a backend that is no
// sandbox.Snapshotter (OCI), whose list figures come one handle at a time.
type plainBackend struct{ sandbox.Backend }

// TestListFigures: a list shows every process's figures as Status does,
// whichever way they were taken: in one call to an in-process
// Snapshotter (local), one round trip to a keeper, or one handle at a
// time (a backend that is no Snapshotter). Each process wrote 3 bytes to
// stdout and 2 to stderr.
func TestListFigures(t *testing.T) {
	kdir, _ := durableDir(t, "regfig-")
	os.Chmod(kdir, 0o700)
	kb, err := keeper.NewBackend(keeper.Config{Dir: filepath.Join(kdir, "k"), Name: "local"})
	if err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(kdir, "k"), 0o700)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		kb.Close(ctx, true)
	})
	for _, tc := range []struct {
		name string
		mut  func(c *Config)
	}{
		{"local", func(c *Config) {}},
		{"keeper", func(c *Config) { c.Persistent = map[string]sandbox.Backend{"local": kb} }},
		{"handles", func(c *Config) { c.Backends["local"] = plainBackend{c.Backends["local"]} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.mut)
			ctx := as("cap", "alice")
			ids := map[string]bool{}
			for range 3 {
				ids[e.spawn(ctx, "printf abc; printf de >&2; exec sleep 60", PersistOptions{})] = true
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				l, err := e.r.List(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				ol := e.r.OperatorList(OperatorFilter{Principal: "alice"})
				if len(l) != 3 || len(ol) != 3 {
					t.Fatalf("list %d, operator list %d, want 3", len(l), len(ol))
				}
				op := map[string]Info{}
				for _, in := range ol {
					op[in.ID] = in
				}
				settled := 0
				for _, in := range l {
					st, err := e.r.Status(ctx, in.ID)
					if err != nil || !ids[in.ID] || op[in.ID].ID != in.ID {
						t.Fatalf("listed %s: status %v, spawned %v, in the operator list %v", in.ID, err, ids[in.ID], op[in.ID].ID != "")
					}
					if in.BufferedBytes == 5 && st.BufferedBytes == 5 && op[in.ID].BufferedBytes == 5 && in.BytesDropped == 0 && in.Phase == PhaseRunning {
						settled++
					}
				}
				if settled == 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("figures never settled at 5 buffered bytes: %+v", l)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
