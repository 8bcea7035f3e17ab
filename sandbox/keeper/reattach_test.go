package keeper_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/keeper"
	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

const (
	clientRole = "keeper-test-client"
	nCounters  = 20
)

// clientReport is what the child client prints before it is killed.
type clientReport struct {
	KeeperPID int      `json:"keeper_pid"`
	Counters  []string `json:"counters"`
	Offsets   []int64  `json:"offsets"`
	Cat       string   `json:"cat"`
	Exit7     string   `json:"exit7"`
	Trigger   string   `json:"trigger"`
	Err       string   `json:"err,omitempty"`
}

// clientMain is the daemon stand-in: it starts the keeper (so a kill -9
// of the starter is tested too), starts the processes, reads some output,
// leaves requests in flight, reports, and waits to be killed.
func clientMain(args []string) int {
	rep, err := runClient(args[0])
	if err != nil {
		rep.Err = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(rep)
	select {} // killed by the test
}

func runClient(dir string) (clientReport, error) {
	var rep clientReport
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := keeper.Start(keeper.Config{Dir: dir})
	if err != nil {
		return rep, err
	}
	rep.KeeperPID = p.PID
	c, err := keeper.Dial(ctx, dir)
	if err != nil {
		return rep, err
	}
	marker := filepath.Base(dir)
	for i := 0; i < nCounters; i++ {
		st, err := c.Start(ctx, spec(marker, counterArgv(marker)...))
		if err != nil {
			return rep, err
		}
		rep.Counters = append(rep.Counters, st.Ref.ID)
	}
	cat := spec(marker, "/usr/bin/cat", "-", marker)
	cat.Stdin.Mode = sandbox.StdinOpen
	rep.Trigger = filepath.Join(dir, "trigger")
	exit7 := spec(marker, "/bin/sh", "-c", `while [ ! -e "$1" ]; do sleep 0.05; done; exit 7`, "sh", rep.Trigger, marker)
	for _, s := range []struct {
		sp  sandbox.ProcessSpec
		dst *string
	}{{cat, &rep.Cat}, {exit7, &rep.Exit7}} {
		st, err := c.Start(ctx, s.sp)
		if err != nil {
			return rep, err
		}
		*s.dst = st.Ref.ID
	}
	for _, id := range rep.Counters {
		l := c.Log(sandbox.Ref{Backend: c.Backend(), ID: id, Lifetime: sandbox.LifetimeBackend}, keeper.Stdout)
		off, err := followLines(ctx, l, 3)
		if err != nil {
			return rep, err
		}
		rep.Offsets = append(rep.Offsets, off)
		l.Changed() // a watch parked in the keeper when the client dies
	}
	go c.Wait(context.Background(), sandbox.Ref{Backend: c.Backend(), ID: rep.Exit7}) // a wait in flight too
	return rep, nil
}

// followLines reads l until at least n whole lines arrived and returns
// the offset after the last byte read (a line boundary: one write per line).
func followLines(ctx context.Context, l *keeper.RemoteLog, n int) (int64, error) {
	var off int64
	lines := 0
	for lines < n {
		ch := l.Changed()
		c, err := l.ReadFrom(off, 1<<20)
		if err != nil {
			return 0, err
		}
		lines += bytes.Count(c.Data, []byte("\n"))
		off = c.Next
		if lines >= n {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return off, nil
}

// spawnClient runs clientMain in a child process and returns its report.
func spawnClient(t *testing.T, dir string) (clientReport, func()) {
	cmd := reexec.Command(clientRole, dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Buffer(nil, 1<<20)
		s.Scan()
		lines <- s.Text()
	}()
	var rep clientReport
	select {
	case l := <-lines:
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			kill()
			t.Fatalf("client report %q: %v", l, err)
		}
	case <-time.After(90 * time.Second):
		kill()
		t.Fatal("client did not report")
	}
	if rep.Err != "" {
		kill()
		t.Fatalf("client: %s", rep.Err)
	}
	return rep, kill
}

// spillSize is the size of a process's stdout spill file on disk, which
// grows while no client is connected (the keeper's pump writes it).
func spillSize(dir, id string) int64 {
	m, _ := filepath.Glob(filepath.Join(dir, "procs", id, "*", "stdout.log"))
	if len(m) != 1 {
		return 0
	}
	st, err := os.Stat(m[0])
	if err != nil {
		return 0
	}
	return st.Size() - 64 // the spill header
}

func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReattachAfterClientKill: the daemon (a child process that started
// the keeper) is killed with SIGKILL while requests are in flight; a new
// client finds everything where it was.
func TestReattachAfterClientKill(t *testing.T) {
	dir := newDir(t)
	rep, kill := spawnClient(t, dir)
	kill()
	if !alive(rep.KeeperPID, 0) {
		t.Fatalf("keeper %d died with its starter", rep.KeeperPID)
	}
	// Nobody is connected now. The counters keep writing: their spill
	// files grow past what the dead client had read.
	for i, id := range rep.Counters {
		pollUntil(t, 30*time.Second, "counter output while disconnected", func() bool { return spillSize(dir, id) > rep.Offsets[i] })
	}
	if err := os.WriteFile(rep.Trigger, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, "exit record of a process that ended while disconnected", func() bool {
		_, err := os.Stat(filepath.Join(dir, "procs", rep.Exit7, "exit.json"))
		return err == nil
	})

	c := dial(t, dir)
	ctx := ctxT(t, 60*time.Second)
	if c.KeeperPID() != rep.KeeperPID {
		t.Fatalf("reconnected to keeper %d, want %d", c.KeeperPID(), rep.KeeperPID)
	}
	ref := func(id string) sandbox.Ref {
		return sandbox.Ref{Backend: c.Backend(), ID: id, Lifetime: sandbox.LifetimeBackend}
	}
	// The record is renamed into place before the flush that makes it
	// durable, and the exit is reported only after that flush (RFC §16).
	pollUntil(t, 30*time.Second, "the recorded exit reported", func() bool {
		st, err := c.Inspect(ctx, ref(rep.Exit7))
		return err == nil && st.Phase == sandbox.PhaseExited
	})
	checkListed(t, c, rep)
	for i, id := range rep.Counters {
		l := c.Log(ref(id), keeper.Stdout)
		all := readAll(t, l, 0)
		n := checkCounters(t, all, 0)
		if int64(len(all)) <= rep.Offsets[i] {
			t.Fatalf("counter %d: %d bytes, not past the saved offset %d", i, len(all), rep.Offsets[i])
		}
		// The saved offset continues exactly: the next line is the one
		// after the last line the dead client saw.
		rest := readAll(t, l, rep.Offsets[i])
		before := checkCounters(t, all[:rep.Offsets[i]], 0)
		checkCounters(t, rest, before)
		if !bytes.HasPrefix(rest, all[rep.Offsets[i]:]) {
			t.Fatalf("counter %d: read from the saved offset differs from the full read", i)
		}
		t.Logf("counter %d: %d lines, %d before the kill", i, n, before)
	}
	msg := "hello keeper\n"
	if n, err := c.WriteStdin(ctx, ref(rep.Cat), []byte(msg)); err != nil || n != len(msg) {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	waitFor(t, c.Log(ref(rep.Cat), keeper.Stdout), 30*time.Second, func(b []byte) bool { return string(b) == msg })
	x, err := c.Wait(ctx, ref(rep.Exit7))
	if err != nil || x.Code != 7 || x.Signal != 0 || x.Reason != keeper.ReasonExited {
		t.Fatalf("exit of the process that ended while disconnected: %+v, %v", x, err)
	}
}

func checkListed(t *testing.T, c *keeper.Client, rep clientReport) {
	t.Helper()
	list, err := c.List(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	phase := map[string]sandbox.Phase{}
	for _, st := range list {
		phase[st.Ref.ID] = st.Phase
	}
	if len(list) != nCounters+2 {
		t.Fatalf("listed %d processes, want %d", len(list), nCounters+2)
	}
	for _, id := range append(append([]string(nil), rep.Counters...), rep.Cat) {
		if phase[id] != sandbox.PhaseRunning {
			t.Fatalf("%s: phase %v, want running", id, phase[id])
		}
	}
	if phase[rep.Exit7] != sandbox.PhaseExited {
		t.Fatalf("exit7: phase %v, want exited", phase[rep.Exit7])
	}
}
