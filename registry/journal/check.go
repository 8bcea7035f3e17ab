package journal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// The check runs in a child process (the reexec role below) because bbolt
// trusts its file: a damaged page can make it fault on a wild pointer,
// panic in a goroutine of its own, recurse without end (a branch page that
// points at an ancestor) or loop while growing memory — none of which a
// recover in the daemon can contain. The child opens the file read-only,
// streams every record it can read to the parent, then runs bbolt's own
// consistency check (tx.Check) once the walk has shown the tree is sane
// enough for it; if it dies, the parent has the records streamed so far
// (for a salvage) and a clear verdict: corrupt. Its stack, heap and time
// are bounded so a pathological file costs seconds, not the machine.
const (
	checkRole  = "capsule-host-journal-check"
	checkHello = "journal-check/1"
	// checkEnv marks the child; an Open inside it means the binary's main
	// does not call reexec.Init (the child ran main instead of the role).
	checkEnv = "CAPSULE_HOST_JOURNAL_CHECK"
	// The child streams records and keeps none: bbolt's check needs a few
	// bytes per page, so 128 MiB of heap is a runaway, not a big journal.
	checkMaxStack = 64 << 20
	checkMaxHeap  = 128 << 20
	maxProblems   = 20
	// maxKey bounds a key the journal writes (a scope key: two names of
	// at most 255 bytes and two separators).
	maxKey = 2*255 + 3
)

func init() { reexec.Register(checkRole, checkMain) }

// dumpLine is one line of the child's output (JSON lines on stdout).
type dumpLine struct {
	Hello   string   `json:"hello,omitempty"`
	Bucket  string   `json:"bucket,omitempty"`
	Key     []byte   `json:"key,omitempty"`
	Value   []byte   `json:"value,omitempty"`
	Nested  bool     `json:"nested,omitempty"`
	Problem string   `json:"problem,omitempty"`
	Busy    bool     `json:"busy,omitempty"`
	Done    bool     `json:"done,omitempty"`
	Buckets []string `json:"buckets,omitempty"`
}

// emitter serialises the child's lines (the memory watchdog writes too).
type emitter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	enc *json.Encoder
}

func (e *emitter) emit(l dumpLine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.enc.Encode(l)
	e.w.Flush()
}

// checkMain is the child: args are the journal path, the bbolt lock
// timeout and the check's time budget, both in milliseconds.
func checkMain(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: journal-check PATH LOCK_MS BUDGET_MS")
		return 2
	}
	lockMS, _ := strconv.Atoi(args[1])
	budgetMS, _ := strconv.Atoi(args[2])
	debug.SetMaxStack(checkMaxStack)
	w := bufio.NewWriter(os.Stdout)
	e := &emitter{w: w, enc: json.NewEncoder(w)}
	e.emit(dumpLine{Hello: checkHello})
	go watchdog(e, time.Duration(budgetMS)*time.Millisecond)
	dump(e, args[0], time.Duration(lockMS)*time.Millisecond)
	return 0
}

// watchdog ends the child when its heap or time budget is spent (a
// looping walk over a cyclic tree).
func watchdog(e *emitter, budget time.Duration) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	deadline := time.Now().Add(budget)
	for range time.Tick(20 * time.Millisecond) {
		metrics.Read(sample)
		why := ""
		if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > checkMaxHeap {
			why = fmt.Sprintf("its heap passed %d MiB", checkMaxHeap>>20)
		} else if time.Now().After(deadline) {
			why = fmt.Sprintf("it ran for %v", budget)
		}
		if why != "" {
			e.emit(dumpLine{Problem: "the checker was stopped: " + why + " (a cyclic or runaway page structure)"})
			os.Exit(3)
		}
	}
}

// dump opens the journal read-only and streams what it holds.
func dump(e *emitter, path string, lockTimeout time.Duration) {
	var db *bbolt.DB
	err := guarded(func() (err error) {
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: lockTimeout, PreLoadFreelist: true})
		return err
	})
	if errors.Is(err, berrors.ErrTimeout) {
		e.emit(dumpLine{Busy: true, Done: true})
		return
	}
	if err != nil {
		e.emit(dumpLine{Problem: "bbolt cannot open the file: " + err.Error(), Done: true})
		return
	}
	defer db.Close()
	done := dumpLine{Done: true}
	err = db.View(func(tx *bbolt.Tx) error {
		done.Buckets = walk(e, tx, path)
		return nil
	})
	if err != nil {
		e.emit(dumpLine{Problem: "read transaction: " + err.Error()})
	}
	e.emit(done)
}

// walk streams every top-level bucket's records, then (only if the walk
// found the structure sound) runs tx.Check. It returns the bucket names.
func walk(e *emitter, tx *bbolt.Tx, path string) []string {
	problems := 0
	if fi, err := os.Stat(path); err == nil && fi.Size() < tx.Size() {
		e.emit(dumpLine{Problem: fmt.Sprintf("file is %d bytes but its pages reach %d: truncated", fi.Size(), tx.Size())})
		problems++
	}
	var names []string
	err := guarded(func() error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			names = append(names, string(name))
			if !walkBucket(e, string(name), b) {
				problems++
			}
			return nil
		})
	})
	if err != nil {
		e.emit(dumpLine{Problem: "reading the bucket list: " + err.Error()})
		problems++
	}
	if problems > 0 {
		return names
	}
	n := 0
	for cerr := range tx.Check() {
		if n++; n <= maxProblems {
			e.emit(dumpLine{Problem: "consistency check: " + cerr.Error()})
		}
	}
	return names
}

// walkBucket streams one bucket's records, one guarded cursor step at a
// time, so a damaged page loses the records from it on, not the bucket.
// It reports whether the bucket read to its end.
func walkBucket(e *emitter, name string, b *bbolt.Bucket) bool {
	c := b.Cursor()
	var last []byte
	var k, v []byte
	var nested bool
	step := c.First
	for {
		err := guarded(func() error {
			k, v = step()
			nested = v == nil // a sub-bucket; an empty value is non-nil
			if len(k) > maxKey || len(v) > 4+maxRecord {
				// Checked before the copy: a damaged element header can
				// claim gigabytes of memory that is not there.
				return fmt.Errorf("an element of %d+%d bytes: the page is damaged", len(k), len(v))
			}
			if k != nil {
				k, v = append([]byte(nil), k...), append([]byte{}, v...)
			}
			return nil
		})
		if err != nil {
			e.emit(dumpLine{Bucket: name, Key: last, Problem: "reading stopped: " + err.Error()})
			return false
		}
		if k == nil {
			return true
		}
		e.emit(dumpLine{Bucket: name, Key: k, Value: v, Nested: nested})
		last, step = k, c.Next
	}
}

// guarded runs fn with faults turned into panics and panics into errors.
func guarded(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt panicked: %v", r)
		}
	}()
	return fn()
}
