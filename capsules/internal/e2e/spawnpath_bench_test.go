package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/internal/testutil"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
)

// BenchmarkSpawnPath is issue 16's full spawn path against bare os/exec,
// interleaved in one run (goal ≤ 1.25× for both):
//
//	toolcall   a warm wasm tool call (testcap `spawn`, the ephemeral
//	           spawn-and-wait of capsule:process) of /bin/true
//	persistent spawn-persistent + wait of /bin/true through the registry
//	           with the keeper-backed local backend, as the daemon runs
//	           it (release after, untimed)
//	osexec     exec.Command("/bin/true").Run() with stdout and stderr
//	           piped, what a Go program would do instead
//
// Each side reports its median and interquartile range in µs
// (testutil.ReportSide) and the ratios of the medians.
//
//	go test -run '^$' -bench SpawnPath -benchtime 2s ./capsules/internal/e2e/
func BenchmarkSpawnPath(b *testing.B) {
	kdir, err := os.MkdirTemp("", "e2e-keeper-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(kdir) })
	kb, err := keeper.NewBackend(keeper.Config{Dir: kdir, Name: "local"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		kb.Close(ctx, true)
	})
	h, reg := newHostRegConfig(b, func(c *registry.Config) {
		c.Persistent = map[string]sandbox.Backend{"local": kb}
	}, "testcap")
	ctx := host.WithPrincipal(context.Background(), "alice")
	rctx := registry.WithCaller(context.Background(), registry.Caller{Capsule: "testcap", Principal: "alice"})
	var last string
	sides := []testutil.Side{
		{Name: "toolcall", Run: func() error {
			res, err := h.Call(ctx, "testcap", "spawn", `{"cmd":"/bin/true"}`)
			if err == nil && !strings.Contains(res.Output, `"exit_code":0`) {
				err = fmt.Errorf("spawn answered %s", res.Output)
			}
			return err
		}},
		{Name: "persistent", Run: func() error {
			id, err := reg.SpawnPersistent(rctx, registry.SpawnRequest{Cmd: "/bin/true"}, registry.PersistOptions{})
			if err != nil {
				return err
			}
			last = id
			ex, err := reg.Wait(rctx, id, 30*time.Second)
			if err == nil && (ex.Code == nil || *ex.Code != 0) {
				err = fmt.Errorf("exit %+v", ex)
			}
			return err
		}, After: func() error { return reg.Release(rctx, last) }},
		{Name: "osexec", Run: func() error {
			cmd := exec.Command("/bin/true")
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
			return cmd.Run()
		}},
	}
	// Warm both paths (the keeper starts on first use; the pool fills).
	for _, s := range sides {
		if err := s.Run(); err != nil {
			b.Fatalf("%s: %v", s.Name, err)
		}
		if s.After != nil {
			s.After()
		}
	}
	b.ResetTimer()
	med := testutil.ReportSides(b, "µs", sides, testutil.Interleave(b, sides, 10))
	b.ReportMetric(med["toolcall"]/med["osexec"], "toolcall/osexec")
	b.ReportMetric(med["persistent"]/med["osexec"], "persistent/osexec")
}
