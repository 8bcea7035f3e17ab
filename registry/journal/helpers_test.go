package journal

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/testutil"
)

func TestMain(m *testing.M) {
	// Every Open of an existing journal runs the checking child; under the
	// race detector each child would sleep 1 s at exit (atexit_sleep_ms).
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(testutil.Main(m))
}

// sample is a record with every field set, varied by i: some exited (by
// code, by signal, or lost), some owner-fallback, some without args.
func sample(i int) Process {
	var k Key
	binary.BigEndian.PutUint64(k[:], uint64(i)+1)
	k[31] = 0xab
	t0 := time.Unix(1_700_000_000+int64(i), 123_456_789).UTC()
	p := Process{
		Key:       k,
		Owner:     Owner{Capsule: "cap-" + fmt.Sprint(i%3), Principal: fmt.Sprintf("user%d@example", i%5), Fallback: i%7 == 0},
		Label:     fmt.Sprintf("job-%d ✓", i),
		Command:   "/usr/bin/sleep",
		Args:      []string{"100", "<&>", "é"},
		Backend:   BackendRef{Name: "oci", ID: fmt.Sprintf("ctr-%04d", i), Lifetime: LifetimeBackend},
		Limits:    Limits{MemoryBytes: 1 << 30, CPUTime: 3 * time.Second, Pids: 64, OpenFiles: 256},
		Stdin:     StdinOpen,
		Overflow:  Backpressure,
		RingBytes: 1 << 20,
		Drain:     [2]int64{int64(i) * 10, 7},
		Started:   t0, LifetimeDeadline: t0.Add(6 * time.Hour),
		IdleTimeout: 30 * time.Minute, IdleDeadline: t0.Add(30 * time.Minute),
		ExitRetention: 5 * time.Minute,
	}
	if i%4 == 3 {
		p.Args, p.Stdin, p.Overflow, p.Backend.Lifetime = nil, StdinClosed, DropOldest, LifetimeHandle
	}
	if i%6 == 5 {
		p.Terminal = &Terminal{Rows: uint16(24 + i%10), Cols: 80, Term: "xterm-256color", Resizes: []Resize{{At: int64(i), Rows: 30, Cols: 100}}}
	}
	at := t0.Add(time.Minute)
	switch i % 5 {
	case 1:
		code := int32(i % 256)
		p.Exit, p.Reason = &Exit{Code: &code, At: at}, ReasonSelfExit
	case 2:
		sig := int32(9)
		p.Exit, p.Reason = &Exit{Signal: &sig, KilledFor: "memory", At: at}, ReasonKilled
	case 3:
		p.Exit, p.Reason = &Exit{At: at}, ReasonRemoved // exit unknown: the backend lost it
	case 4:
		p.Reason = ReasonStopped // claimed, not yet exited
	}
	if p.Exit != nil {
		p.RetentionDeadline = at.Add(p.ExitRetention)
	}
	return p
}

func samples(n int) []Process {
	ps := make([]Process, n)
	for i := range ps {
		ps[i] = sample(i)
	}
	return ps
}

// openT opens path with opts and fails the test on an error.
func openT(t testing.TB, path string, opts Options) (*Journal, Report) {
	t.Helper()
	j, rep, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return j, rep
}

// fill makes a closed journal in a new temp dir holding ps and a few
// scopes, and returns its path.
func fill(t testing.TB, ps []Process) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	j, _ := openT(t, path, Options{})
	for _, p := range ps {
		if err := j.PutProcess(p); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := j.SetSeq(Owner{Capsule: "cap-" + fmt.Sprint(i), Principal: "user0@example"}, uint64(100*i+5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// contents is everything a journal holds, for comparison.
type contents struct {
	procs  []Process
	scopes map[Owner]uint64
}

func read(t testing.TB, j *Journal) contents {
	t.Helper()
	c := contents{scopes: map[Owner]uint64{}}
	if err := j.ForEachProcess(func(p Process) error { c.procs = append(c.procs, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := j.ForEachScope(func(o Owner, n uint64) error { c.scopes[o] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return c
}

func sameProcs(t testing.TB, got, want []Process) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			g, _ := json.Marshal(toProcV1(got[i]))
			w, _ := json.Marshal(toProcV1(want[i]))
			t.Fatalf("record %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

// sealRaw stores any body under key with a correct checksum, for records
// a real journal would never hold.
func sealRaw(key []byte, body string) []byte {
	out := binary.BigEndian.AppendUint32(nil, checksum(key, []byte(body)))
	return append(out, body...)
}
