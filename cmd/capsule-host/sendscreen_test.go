//go:build !leanclient

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	api "github.com/capsule-host/capsule-host/client"
	"github.com/capsule-host/capsule-host/host/config"
)

// TestSendScreen: send --screen prints the screen with the echo of the
// keys in the same command (cat and a bash prompt), returns at the
// settle bound with the screen for a program that echoes nothing, says
// timeout at the bound, and refuses as plain send does: a bad ID and
// another principal's process are no-such-process, a pipe process the
// no-terminal invalid-request. The echo cases pass a long --settle: they
// check what reacted means, not how fast it comes (that is
// BenchmarkKeystrokeCLIVsTmux).
func TestSendScreen(t *testing.T) {
	tokA, tokB := "token-for-alice-0123456789", "token-for-bob-0123456789"
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tc12, err := filepath.Abs("../../capsules/testcap12")
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, func(c *config.Config) {
		c.Capsules = append(c.Capsules, tc12)
		c.TCP.Listen = "127.0.0.1:0"
		c.Principals = map[string]config.Principal{
			"alice": {TokenSHA256: []string{hash(tokA)}},
			"bob":   {TokenSHA256: []string{hash(tokB)}},
		}
	})
	sendJSON := func(args ...string) api.InputResponse {
		t.Helper()
		var r api.InputResponse
		if out := d.must(t, append(append([]string{"send"}, args...), "--screen", "--json")...); json.Unmarshal([]byte(out), &r) != nil || r.Screen == nil {
			t.Fatalf("send %v --screen --json: %s", args, out)
		}
		return r
	}

	cat := d.spawnTermCmd(t, 24, 80, "/bin/cat")
	d.must(t, "wait", cat, "--input", "--timeout", "20s")
	if out := d.must(t, "send", cat, "-l", "hello-cat", "--screen", "--settle", "20s"); strings.TrimSpace(out) != "hello-cat" {
		t.Errorf("send --screen to cat printed %q, want its echo hello-cat", out)
	}
	bash := d.spawnTerminal(t, 24, 80)
	d.must(t, "wait", bash, "--input", "--timeout", "20s")
	if r := sendJSON(bash[:10], "x", "--settle", "20s"); r.Reaction != api.ReactionOutput || r.Written != 1 || !strings.Contains(screenText(r.Screen.Lines), "$ x") {
		t.Errorf("send x --screen to bash: reaction %q, written %d, screen %q", r.Reaction, r.Written, screenText(r.Screen.Lines))
	}

	// No echo: stty -echo, then cat (blocked reading: the stty is done).
	silent := d.spawnTermCmd(t, 24, 80, "/bin/sh", "-c", "stty -echo; exec cat")
	d.must(t, "wait", silent, "--input", "--timeout", "20s")
	if r := sendJSON(silent, "-l", "secret"); r.Reaction != api.ReactionQuiet || strings.Contains(screenText(r.Screen.Lines), "secret") {
		t.Errorf("send --screen with no echo: reaction %q, screen %q; want quiet, no echo", r.Reaction, screenText(r.Screen.Lines))
	}
	if r := sendJSON(silent, "-l", "more", "--settle", "30s", "--timeout", "50ms"); r.Reaction != api.ReactionTimeout {
		t.Errorf("send --screen past its bound: reaction %q, want timeout", r.Reaction)
	}

	ctx := context.Background()
	sock := api.NewUnix(d.sock)
	code := func(err error) string {
		var ae *api.Error
		if !errors.As(err, &ae) {
			return "not an API error: " + errString(err)
		}
		return ae.Code
	}
	keys := api.InputRequest{Keys: []api.Key{{Name: "x"}}}
	withScreen := keys
	withScreen.Screen = true
	bad := strings.Repeat("a", 52)
	if _, err := sock.InputScreen(ctx, bad, withScreen); code(err) != api.CodeNoSuchProcess {
		t.Errorf("send --screen to an unknown ID: %v, want no-such-process", err)
	}
	if _, errOut, c := d.cli(t, "send", bad, "x", "--screen"); c == 0 || !strings.Contains(errOut, "no such process") {
		t.Errorf("CLI send --screen to an unknown ID: exit %d %q", c, errOut)
	}
	pipe := d.spawnTicker(t, "alice")
	t.Cleanup(func() { d.cli(t, "stop", pipe, "--grace", "200ms") })
	_, plainErr := sock.InputScreen(ctx, pipe, keys)
	_, screenErr := sock.InputScreen(ctx, pipe, withScreen)
	if code(plainErr) != api.CodeInvalidRequest || code(screenErr) != code(plainErr) || !strings.Contains(errString(screenErr), "no terminal") {
		t.Errorf("send to a pipe process: plain %v, --screen %v; want the same invalid-request", plainErr, screenErr)
	}
	// Over TCP, bob sees none of alice's processes.
	bob := api.NewTCP(d.tcp, tokB)
	if _, err := bob.InputScreen(ctx, cat, withScreen); code(err) != api.CodeNoSuchProcess {
		t.Errorf("bob's send --screen to alice's terminal: %v, want no-such-process", err)
	}
	if r, err := api.NewTCP(d.tcp, tokA).InputScreen(ctx, cat, api.InputRequest{Keys: []api.Key{{Text: "-a"}}, Screen: true, SettleMS: ptr(int64(20_000))}); err != nil || r.Reaction != api.ReactionOutput || !strings.Contains(screenText(r.Screen.Lines), "hello-cat-a") {
		t.Errorf("alice's own send --screen over TCP: %+v, %v", r, err)
	}
	if _, err := sock.InputScreen(ctx, cat, api.InputRequest{Keys: keys.Keys, SettleMS: ptr(int64(5))}); code(err) != api.CodeInvalidRequest {
		t.Errorf("settle_ms without screen: %v, want invalid-request", err)
	}
}

func ptr[T any](v T) *T { return &v }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
