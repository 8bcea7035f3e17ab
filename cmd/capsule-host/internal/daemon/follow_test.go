package daemon

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/client"
)

// callTestcap calls a testcap tool as alice and returns its "ok" value.
func (d *liveDaemon) callTestcap(t *testing.T, tool, input string) json.RawMessage {
	t.Helper()
	c := d.dial(t, false)
	a := roundTrip(t, c, bufio.NewReader(c), post("/v1/call", `{"capsule":"testcap","tool":"`+tool+`","principal":"alice","input":`+input+`}`))
	var res client.CallResponse
	var v struct{ OK json.RawMessage }
	if a.status != 200 || json.Unmarshal([]byte(a.body), &res) != nil || json.Unmarshal(res.Output, &v) != nil || v.OK == nil {
		t.Fatalf("%s: %d %s", tool, a.status, a.body)
	}
	return v.OK
}

// Following a process (logs?follow=1, as `logs -f` and the MCP
// subscriptions do) reads its output; it must not write into its owner's
// event log. It did: the follower waited by polling the owner's events,
// each poll consumed the process's log-ready event, which re-armed the
// next, so a process printing a line every 10 ms put an event per line
// into the owner's log and pushed the owner's unread events (here: the
// exit of another process) out of retention.
func TestFollowKeepsOwnerEvents(t *testing.T) {
	d := startLive(t, nil)
	var exited string
	if err := json.Unmarshal(d.callTestcap(t, "spawn_persistent", `{"request":{"cmd":"/bin/sh","args":["-c","exit 3"]}}`), &exited); err != nil {
		t.Fatal(err)
	}
	var ticker string
	if err := json.Unmarshal(d.callTestcap(t, "spawn_persistent", `{"request":{"cmd":"/bin/sh","args":["-c","while :; do echo tick; sleep 0.01; done"]}}`), &ticker); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.callTestcap(t, "stop", `{"id":"`+ticker+`","grace_ms":100}`) })

	// 60 chunks: at least 60 wake-ups of the follower.
	c, sc := d.follow(t, ticker)
	for n := 0; n < 60; n++ {
		if !sc.Scan() {
			t.Fatalf("the follow stream ended after %d chunks: %v", n, sc.Err())
		}
	}
	c.Close()

	var b struct {
		Events []struct {
			ID   string
			Kind string
		}
		Missed uint64
	}
	raw := d.callTestcap(t, "poll_events", `{"cursor":0,"max":4096,"timeout_ms":0}`)
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("poll_events: %s: %v", raw, err)
	}
	sawExit := false
	for _, e := range b.Events {
		sawExit = sawExit || (e.ID == exited && strings.Contains(strings.ToLower(e.Kind), "exit"))
	}
	// The owner never polled: one log-ready per stream of each process is
	// pending (coalesced), plus the exit.
	if len(b.Events) > 5 || b.Missed > 0 || !sawExit {
		t.Fatalf("alice's events after a follow of 60 chunks: %d events, %d missed, exit of the other process seen %v; want at most 5, none missed, the exit seen: %.600s",
			len(b.Events), b.Missed, sawExit, raw)
	}
}
