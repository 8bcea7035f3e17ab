package journal

import (
	"bufio"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/blake2b"

	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

const putLoopRole = "journal-test-put-loop"

func init() {
	// The daemon of TestKilledMidLoopLosesNothingAcknowledged: it opens
	// the journal and journals sample(0), sample(1), ... printing each
	// index once PutProcess has returned, until it is killed.
	reexec.Register(putLoopRole, func(args []string) int {
		j, _, err := Open(args[0], Options{})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		for i := 0; ; i++ {
			if err := j.PutProcess(sample(i)); err != nil {
				fmt.Println("error", err)
				return 1
			}
			if _, err := j.BumpSeq(Owner{Capsule: "c", Principal: "p"}); err != nil {
				fmt.Println("error", err)
				return 1
			}
			fmt.Println(i)
		}
	})
}

// TestKilledMidLoopLosesNothingAcknowledged: a daemon killed with SIGKILL
// in the middle of journaling loses no record whose PutProcess returned,
// and leaves no partial record. (A process crash, not a power cut: the
// page cache survives it. That fsync reaches the disk is bbolt's
// fdatasync, which this test cannot observe.)
func TestKilledMidLoopLosesNothingAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	cmd := reexec.Command(putLoopRole, path)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := -1
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.After(60 * time.Second)
	for acked < 40 {
		select {
		case l, ok := <-lines:
			n, err := strconv.Atoi(l)
			if !ok || err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child said %q", l)
			}
			acked = n
		case <-deadline:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("only %d puts in 60s", acked+1)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL) // mid-loop: it never stops on its own
	for range lines {
	}
	cmd.Wait()

	j, rep := openT(t, path, Options{Strict: true}) // strict: no partial record
	defer j.Close()
	if !rep.CleanShutdown.IsZero() || rep.PreviousOpen.IsZero() {
		t.Fatalf("a killed run looks clean: %+v", rep)
	}
	c := read(t, j)
	if len(c.procs) <= acked {
		t.Fatalf("%d records after %d acknowledged puts", len(c.procs), acked+1)
	}
	for i, p := range c.procs {
		if want := sample(i); !reflect.DeepEqual(p, want) {
			t.Fatalf("record %d differs from what was put", i)
		}
	}
	if n := c.scopes[Owner{Capsule: "c", Principal: "p"}]; n < uint64(acked)+2 {
		t.Fatalf("next seq %d after %d acknowledged bumps", n, acked+1)
	}
}

// TestNoRawIDOnDisk: the journal is keyed by the registry's keyed hash of
// an ID; neither the ID nor its bytes reach the file or any error text.
func TestNoRawIDOnDisk(t *testing.T) {
	enc := base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
	hashKey := make([]byte, 32)
	rand.Read(hashKey)
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	j, _ := openT(t, path, Options{})
	var ids []string
	var raws [][]byte
	for i := range 20 {
		raw := make([]byte, 32)
		rand.Read(raw)
		id := enc.EncodeToString(raw) // the registry's wire form: 52 chars
		h, _ := blake2b.New256(hashKey)
		h.Write([]byte(id))
		p := sample(i)
		copy(p.Key[:], h.Sum(nil))
		if err := j.PutProcess(p); err != nil {
			t.Fatal(err)
		}
		j.UpdateDrain(p.Key, Stdout, 99)
		j.UpdateExit(p.Key, Exit{At: p.Started.Add(time.Second)}, ReasonStopped)
		ids, raws = append(ids, id), append(raws, raw)
	}
	j.Close()
	// Text that could reach a log: a report with a dropped record and the
	// record errors of a damaged journal.
	var logs strings.Builder
	j, rep := openT(t, path, Options{})
	fmt.Fprintf(&logs, "%+v\n", rep)
	j.Close()
	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)/2], 0o600)
	_, _, err := Open(path, Options{})
	fmt.Fprintf(&logs, "%v\n", err)
	if _, rep, err := Open(path, Options{Salvage: true}); err == nil {
		fmt.Fprintf(&logs, "%+v\n", rep)
	}
	for i, id := range ids {
		for _, f := range []string{"file", "logs"} {
			hay := string(data)
			if f == "logs" {
				hay = logs.String()
			}
			if strings.Contains(strings.ToLower(hay), id) || strings.Contains(hay, string(raws[i])) {
				t.Fatalf("raw ID %d found in the %s", i, f)
			}
		}
	}
}
