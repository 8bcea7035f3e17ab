//go:build !leanclient

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/cmd/capsule-host/internal/daemon"
)

// serve --watch: a changed manifest reloads the capsule and its
// persistent process keeps running; a broken module keeps the previous
// version serving, with the error in the log and in `capsules`; fixing
// it reloads again.
func TestWatchReloadsChangedCapsule(t *testing.T) {
	tc := capsuleCopy(t, "testcap")
	d := startReloadDaemon(t, []string{tc}, false, nil, func(o *daemon.Options) { o.Watch = 50 * time.Millisecond })
	tick := d.spawnTicker(t, "alice")

	setVersion(t, tc, "1.0.1")
	waitLong(t, func() bool { return d.version(t, "testcap") == "1.0.1" })
	st := d.callOut(t, "testcap", "status", "alice", map[string]any{"id": tick})
	if b, _ := json.Marshal(st); !strings.Contains(string(b), "running") {
		t.Fatalf("the ticker after the watch reload: %s", b)
	}

	wasm := filepath.Join(tc, "testcap.wasm")
	good, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wasm, []byte("\x00asm broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitLong(t, func() bool {
		for _, f := range d.capsuleList(t).Failed {
			if f.Dir == tc && f.Serving == "1.0.1" && f.Kind != "" {
				return true
			}
		}
		return false
	})
	if !strings.Contains(d.logs.String(), "watch reload: the rebuilt capsule did not load") {
		t.Fatalf("the broken rebuild is not in the log:\n%s", d.logs.String())
	}
	if v := d.version(t, "testcap"); v != "1.0.1" {
		t.Fatalf("after a broken rebuild testcap serves %q, want the previous 1.0.1", v)
	}
	d.callOut(t, "testcap", "status", "alice", map[string]any{"id": tick})

	if err := os.WriteFile(wasm, good, 0o644); err != nil {
		t.Fatal(err)
	}
	setVersion(t, tc, "1.0.2")
	waitLong(t, func() bool { return d.version(t, "testcap") == "1.0.2" && len(d.capsuleList(t).Failed) == 0 })
	st = d.callOut(t, "testcap", "status", "alice", map[string]any{"id": tick})
	if b, _ := json.Marshal(st); !strings.Contains(string(b), "running") {
		t.Fatalf("the ticker after the fixed rebuild: %s", b)
	}
}
