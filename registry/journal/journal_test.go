package journal

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/registry/statedir"
)

func TestRoundTripThroughTheFile(t *testing.T) {
	want := samples(25)
	path := fill(t, want)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal file: %v %v, want mode 0600", fi, err)
	}
	j, rep := openT(t, path, Options{})
	defer j.Close()
	if rep.Created || rep.Processes != 25 || rep.Scopes != 3 || len(rep.Dropped) != 0 || rep.Salvaged {
		t.Fatalf("report %+v", rep)
	}
	c := read(t, j)
	sameProcs(t, c.procs, want) // keys are ordered by index
	if c.scopes[Owner{Capsule: "cap-2", Principal: "user0@example"}] != 205 || len(c.scopes) != 3 {
		t.Fatalf("scopes %v", c.scopes)
	}
	got, err := j.GetProcess(want[7].Key)
	if err != nil || !reflect.DeepEqual(got, want[7]) {
		t.Fatalf("GetProcess = %+v, %v", got, err)
	}
}

func TestUpdates(t *testing.T) {
	p := sample(0)
	j, _ := openT(t, filepath.Join(t.TempDir(), FileName), Options{})
	defer j.Close()
	if err := j.PutProcess(p); err != nil {
		t.Fatal(err)
	}
	at := p.Started.Add(time.Hour)
	sig := int32(15)
	steps := []struct {
		name string
		do   func() error
		want func(*Process)
	}{
		{"drain stdout", func() error { return j.UpdateDrain(p.Key, Stdout, 4096) }, func(q *Process) { q.Drain[0] = 4096 }},
		{"drain stderr", func() error { return j.UpdateDrain(p.Key, Stderr, 9) }, func(q *Process) { q.Drain[1] = 9 }},
		{"touch", func() error { return j.Touch(p.Key, at) }, func(q *Process) { q.IdleDeadline = at.Add(q.IdleTimeout) }},
		{"exit", func() error { return j.UpdateExit(p.Key, Exit{Signal: &sig, At: at}, ReasonStopped) }, func(q *Process) {
			q.Exit, q.Reason, q.RetentionDeadline = &Exit{Signal: &sig, At: at}, ReasonStopped, at.Add(q.ExitRetention)
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		s.want(&p)
		got, err := j.GetProcess(p.Key)
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Fatalf("after %s: %+v, %v\nwant %+v", s.name, got, err, p)
		}
	}
	if err := j.UpdateDrain(p.Key, 2, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("drain of stream 2: %v, want ErrInvalid", err)
	}
	if err := j.UpdateProcess(p.Key, func(q *Process) error { q.Started = time.Time{}; return nil }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an update that breaks the record: %v, want ErrInvalid", err)
	}
	if got, _ := j.GetProcess(p.Key); !reflect.DeepEqual(got, p) {
		t.Fatal("a refused update changed the record")
	}
	if err := j.DeleteProcess(p.Key); err != nil {
		t.Fatal(err)
	}
	if err := j.DeleteProcess(p.Key); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	var re *RecordError
	_, err := j.GetProcess(p.Key)
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &re) || re.Key != p.Key.Short() || re.Bucket != "procs" {
		t.Fatalf("GetProcess after delete: %v", err)
	}
	if err := j.Touch(p.Key, at); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Touch after delete: %v", err)
	}
}

func TestPutRefusesInvalidRecord(t *testing.T) {
	j, _ := openT(t, filepath.Join(t.TempDir(), FileName), Options{})
	defer j.Close()
	p := sample(0)
	p.Backend.Name = ""
	var re *RecordError
	if err := j.PutProcess(p); !errors.Is(err, ErrInvalid) || !errors.As(err, &re) {
		t.Fatalf("PutProcess = %v, want ErrInvalid", err)
	}
	if _, err := j.GetProcess(p.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an invalid record was written: %v", err)
	}
}

func TestSequencesContinueAfterRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	real := Owner{Capsule: "c", Principal: "alice"}
	fallback := Owner{Capsule: "c", Principal: "alice", Fallback: true}
	j, _ := openT(t, path, Options{})
	if n, err := j.NextSeq(real); n != 1 || err != nil {
		t.Fatalf("NextSeq of a new scope = %d %v, want 1", n, err)
	}
	if n, err := j.BumpSeq(real); n != 1 || err != nil {
		t.Fatalf("BumpSeq = %d %v, want 1", n, err)
	}
	if n, err := j.ReserveSeq(real, 1024); n != 2 || err != nil {
		t.Fatalf("ReserveSeq = %d %v, want 2", n, err)
	}
	if err := j.SetSeq(real, 10); !errors.Is(err, ErrSeqBackwards) {
		t.Fatalf("SetSeq backwards: %v", err)
	}
	if err := j.SetSeq(fallback, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := j.ReserveSeq(real, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ReserveSeq(0): %v", err)
	}
	if _, err := j.BumpSeq(Owner{Capsule: "c"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("BumpSeq of an owner without principal: %v", err)
	}
	j.Close()
	j, _ = openT(t, path, Options{})
	defer j.Close()
	if n, _ := j.NextSeq(real); n != 1026 {
		t.Fatalf("after restart NextSeq = %d, want 1026", n)
	}
	if n, _ := j.NextSeq(fallback); n != 7 {
		t.Fatalf("fallback scope NextSeq = %d, want 7 (its own sequence)", n)
	}
	if err := j.DeleteScope(real); err != nil {
		t.Fatal(err)
	}
	if n, _ := j.NextSeq(real); n != 1 {
		t.Fatalf("after DeleteScope NextSeq = %d, want 1", n)
	}
}

func TestCleanShutdownIsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	clock := time.Unix(1_800_000_000, 0).UTC()
	now := func() time.Time { return clock }
	j, rep := openT(t, path, Options{Now: now})
	if !rep.Created || !rep.CreatedAt.Equal(clock) || !rep.PreviousOpen.IsZero() {
		t.Fatalf("first report %+v", rep)
	}
	if _, _, ok := rep.Downtime(clock); ok {
		t.Fatal("a new journal knows a downtime")
	}
	clock = clock.Add(time.Hour)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := j.PutProcess(sample(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("PutProcess after Close: %v", err)
	}
	clock = clock.Add(time.Minute)
	j, rep = openT(t, path, Options{Now: now})
	defer j.Close()
	d, exact, ok := rep.Downtime(clock)
	if rep.Created || !ok || !exact || d != time.Minute || !rep.PreviousOpen.Equal(clock.Add(-time.Hour-time.Minute)) {
		t.Fatalf("report %+v: downtime %v exact %v ok %v, want 1m exact", rep, d, exact, ok)
	}
}

func TestOpenRefusesInsecureFile(t *testing.T) {
	path := fill(t, samples(1))
	os.Chmod(path, 0o644)
	if _, _, err := Open(path, Options{}); !errors.Is(err, statedir.ErrInsecure) {
		t.Fatalf("Open of a 0644 journal: %v, want statedir.ErrInsecure", err)
	}
}

func TestOpenIgnoresAStaleHalfCreatedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	os.WriteFile(path+".new", []byte("a creation that crashed"), 0o600)
	j, rep := openT(t, path, Options{})
	defer j.Close()
	if !rep.Created {
		t.Fatalf("report %+v", rep)
	}
	if _, err := os.Stat(path + ".new"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stale .new is still there: %v", err)
	}
}

func TestOpenWhileOpenIsBusy(t *testing.T) {
	path := fill(t, samples(1))
	j, _ := openT(t, path, Options{})
	defer j.Close()
	_, _, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("second Open: %v, want ErrBusy", err)
	}
}

func TestOpenInsideTheCheckerIsRefused(t *testing.T) {
	path := fill(t, samples(1))
	t.Setenv(checkEnv, "1")
	_, _, err := Open(path, Options{})
	if !errors.Is(err, ErrChecker) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v, want ErrChecker (and not ErrCorrupt)", err)
	}
}

// TestConcurrentWriters: writes from many goroutines keep the meta
// record's tally exact (the next Open checks it).
func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	j, _ := openT(t, path, Options{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g * 10; i < g*10+10; i++ {
				p := sample(i)
				if err := j.PutProcess(p); err != nil {
					t.Error(err)
					return
				}
				j.UpdateDrain(p.Key, Stderr, int64(i))
				j.BumpSeq(p.Owner)
				if i%3 == 0 {
					j.DeleteProcess(p.Key)
				}
			}
		}()
	}
	wg.Wait()
	j.Close()
	j, rep := openT(t, path, Options{Strict: true})
	defer j.Close()
	if rep.Processes != 40 {
		t.Fatalf("report %+v, want 40 processes", rep)
	}
}

// Coalesced writes from many goroutines are all durable: after a reopen
// the exits of half the records are there and the other half is gone;
// a write after the coalescing ended is a plain transaction again.
func TestCoalescedWritesAreDurable(t *testing.T) {
	ps := samples(200)
	path := fill(t, ps)
	j, _ := openT(t, path, Options{})
	end := j.Coalesce()
	code := int32(3)
	var wg sync.WaitGroup
	errs := make(chan error, len(ps))
	for i, p := range ps {
		wg.Go(func() {
			if err := j.UpdateExit(p.Key, Exit{Code: &code, At: time.Unix(1700000000, 0)}, "stopped"); err != nil {
				errs <- err
			}
			if i%2 == 0 {
				if err := j.DeleteProcess(p.Key); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	end()
	end() // idempotent
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if j.coalescing.Load() != 0 {
		t.Fatalf("coalescing = %d after end", j.coalescing.Load())
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, _ = openT(t, path, Options{})
	defer j.Close()
	got := read(t, j).procs
	if len(got) != len(ps)/2 {
		t.Fatalf("%d records after the reopen, want %d", len(got), len(ps)/2)
	}
	for _, p := range got {
		if p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != code || p.Reason != "stopped" {
			t.Fatalf("record %x: exit %+v reason %q, want code %d stopped", p.Key, p.Exit, p.Reason, code)
		}
	}
}
