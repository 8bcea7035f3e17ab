package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// rawPut writes a raw value into a closed journal, bypassing the codec,
// as a journal writer would (the meta record's tally follows), or with
// val nil deletes.
func rawPut(t *testing.T, path, bucket string, key, val []byte) {
	t.Helper()
	rawTx(t, path, func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists([]byte(bucket)); err != nil {
			return err
		}
		if bucket != bucketProcs && bucket != bucketScopes {
			return tx.Bucket([]byte(bucket)).Put(key, val)
		}
		return store(tx, path, bucket, key, val)
	})
}

func rawTx(t *testing.T, path string, fn func(*bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// highWater is the size the journal's pages reach (bbolt may leave slack
// after them; cutting only slack loses nothing).
func highWater(t *testing.T, path string) int {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	db.View(func(tx *bbolt.Tx) error { n = tx.Size(); return nil })
	return int(n)
}

// wantCorrupt checks err is a *CorruptError for path, saying the fix, and
// that the file was left where it was.
func wantCorrupt(t *testing.T, path string, err error) {
	t.Helper()
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("Open = %v, want a CorruptError for %s", err, path)
	}
	if !strings.Contains(err.Error(), "move it aside to start empty, or restore a backup") {
		t.Fatalf("the error does not say the fix: %v", err)
	}
	if _, serr := os.Stat(path); serr != nil {
		t.Fatalf("a refused journal was moved: %v", serr)
	}
}

func TestTruncatedFile(t *testing.T) {
	want := samples(60) // several leaf pages
	orig := fill(t, want)
	full, _ := os.ReadFile(orig)
	hwm := highWater(t, orig)
	for _, size := range []int{0, 100, 4096, 2 * 4096, hwm / 2, hwm - 4096, hwm - 1} {
		path := filepath.Join(t.TempDir(), FileName)
		os.WriteFile(path, full[:size], 0o600)
		_, _, err := Open(path, Options{})
		wantCorrupt(t, path, err)

		j, rep, err := Open(path, Options{Salvage: true})
		if err != nil {
			t.Fatalf("size %d: salvage: %v", size, err)
		}
		got := read(t, j)
		j.Close()
		if !rep.Salvaged || rep.Processes != len(got.procs) || len(rep.Dropped) == 0 {
			t.Fatalf("size %d: report %+v for %d records", size, rep, len(got.procs))
		}
		aside, err := os.ReadFile(rep.MovedAside)
		if err != nil || !bytes.Equal(aside, full[:size]) {
			t.Fatalf("size %d: the corrupt file was not kept as it was at %s: %v", size, rep.MovedAside, err)
		}
		for _, p := range got.procs { // what was salvaged is exact
			if i := int(p.Key[7]) - 1; !reflect.DeepEqual(p, want[i]) {
				t.Fatalf("size %d: salvaged record %d differs", size, i)
			}
		}
		if _, rep2, err := Open(path, Options{}); err != nil || rep2.Salvaged {
			t.Fatalf("size %d: the salvaged journal does not open cleanly: %v %+v", size, err, rep2)
		}
	}
}

func TestGarbageFile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	path := filepath.Join(t.TempDir(), FileName)
	os.WriteFile(path, junk, 0o600)
	_, _, err := Open(path, Options{})
	wantCorrupt(t, path, err)
	j, rep, err := Open(path, Options{Salvage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if !rep.Salvaged || rep.Processes != 0 || len(rep.Dropped) != 1 || !errors.Is(rep.Dropped[0], ErrCorrupt) {
		t.Fatalf("report %+v", rep)
	}
	if err := j.PutProcess(sample(0)); err != nil {
		t.Fatalf("the fresh journal is not usable: %v", err)
	}
}

// TestFlippedBytes flips bytes all over a real journal: every outcome is a
// refusal (ErrCorrupt), a report of dropped records, or the same data —
// never a panic, and never different data passed off as sound. (A flip in
// the newest meta page makes bbolt fall back to the previous one, the
// state before Close's clean-shutdown write: the same data.)
func TestFlippedBytes(t *testing.T) {
	want := samples(24)
	orig := fill(t, want)
	full, _ := os.ReadFile(orig)
	j, _ := openT(t, orig, Options{})
	wantData := read(t, j)
	j.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	const pageSize = 4096
	var corrupt, dropped, same int
	for _, page := range usedPages(t, orig) {
		// The page id, the element count, an element header, data.
		for _, off := range []int{0, 10, 16 + rng.IntN(48), 64 + rng.IntN(4000)} {
			pos := page*pageSize + off
			bad := append([]byte(nil), full...)
			bad[pos] ^= byte(1 << rng.IntN(8))
			path := filepath.Join(t.TempDir(), FileName)
			os.WriteFile(path, bad, 0o600)
			t0 := time.Now()
			j, rep, err := Open(path, Options{})
			if d := time.Since(t0); d > time.Second {
				t.Logf("flip at %d: Open took %v: %v", pos, d, err)
			}
			switch {
			case errors.Is(err, ErrCorrupt):
				corrupt++
				salvageAfterFlip(t, path, pos)
			case err != nil:
				t.Fatalf("flip at %d: Open = %v, want nil or ErrCorrupt", pos, err)
			case len(rep.Dropped) > 0:
				dropped++
				j.Close()
			default:
				got := read(t, j)
				j.Close()
				if !reflect.DeepEqual(got, wantData) {
					t.Fatalf("flip at %d: Open succeeded, reported nothing, and the data differs", pos)
				}
				same++
			}
		}
	}
	t.Logf("%d flips: %d refused as corrupt, %d with dropped records, %d harmless", corrupt+dropped+same, corrupt, dropped, same)
	if corrupt == 0 || dropped == 0 {
		t.Fatalf("the flips never hit a refusal (%d) or a record (%d)", corrupt, dropped)
	}
}

// usedPages lists the pages in use (meta, freelist, branch, leaf): a flip
// in a free page is harmless by construction and would only cost time.
func usedPages(t *testing.T, path string) []int {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var pages []int
	db.View(func(tx *bbolt.Tx) error {
		for id := 0; ; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			if info.Type != "free" {
				pages = append(pages, id)
			}
		}
	})
	return pages
}

func salvageAfterFlip(t *testing.T, path string, pos int) {
	t.Helper()
	j, rep, err := Open(path, Options{Salvage: true})
	if err != nil {
		t.Fatalf("flip at %d: salvage: %v", pos, err)
	}
	defer j.Close()
	if !rep.Salvaged || rep.Corruption == nil {
		t.Fatalf("flip at %d: salvage report %+v", pos, rep)
	}
}

func TestUnknownRecordVersion(t *testing.T) {
	path := fill(t, samples(3))
	p := sample(1)
	v2 := sealRaw(p.Key[:], strings.Replace(string(mustEncode(t, p)[4:]), `"v":1`, `"v":2`, 1))
	rawPut(t, path, bucketProcs, p.Key[:], v2)
	j, rep := openT(t, path, Options{})
	var re *RecordError
	if rep.Processes != 2 || len(rep.Dropped) != 1 || !errors.Is(rep.Dropped[0], ErrUnknownVersion) || !errors.As(rep.Dropped[0], &re) {
		t.Fatalf("report %+v", rep)
	}
	if re.Bucket != "procs" || re.Key != p.Key.Short() || !strings.Contains(re.Error(), "version 2 (this build reads 1)") {
		t.Fatalf("dropped %q (bucket %q key %q)", re, re.Bucket, re.Key)
	}
	if c := read(t, j); len(c.procs) != 2 {
		t.Fatalf("ForEachProcess gave %d records, want the 2 readable ones", len(c.procs))
	}
	if _, err := j.GetProcess(p.Key); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("GetProcess: %v", err)
	}
	j.Close()
	_, _, err := Open(path, Options{Strict: true})
	if !errors.Is(err, ErrUnknownVersion) || !errors.As(err, &re) {
		t.Fatalf("strict Open: %v", err)
	}
	if _, rep, _ := Open(path, Options{}); len(rep.Dropped) != 1 {
		// the record is left for a build that reads it
		t.Fatalf("the unreadable record was not kept: %+v", rep)
	}
}

func TestUnknownBucketAndMalformedScope(t *testing.T) {
	path := fill(t, samples(1))
	rawPut(t, path, "future", []byte("k"), []byte("v"))
	rawPut(t, path, bucketScopes, scopeKey(Owner{Capsule: "x", Principal: "y"}), []byte("garbage"))
	j, rep := openT(t, path, Options{})
	defer j.Close()
	if len(rep.Dropped) != 2 || !errors.Is(rep.Dropped[0], ErrUnknownBucket) && !errors.Is(rep.Dropped[1], ErrUnknownBucket) {
		t.Fatalf("report %+v", rep)
	}
}

func TestNewerFormatIsNeverSalvaged(t *testing.T) {
	path := fill(t, samples(2))
	mv, _ := encodeMeta(meta{Format: formatVersion})
	rawPut(t, path, bucketMeta, []byte(keyMeta), sealRaw([]byte(keyMeta), strings.Replace(string(mv[4:]), `"format":1`, `"format":9`, 1)))
	before, _ := os.ReadFile(path)
	for _, opts := range []Options{{}, {Salvage: true}} {
		_, _, err := Open(path, opts)
		var fe *FormatError
		if !errors.Is(err, ErrFormat) || !errors.As(err, &fe) || fe.Found != 9 || errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open(%+v) = %v, want a FormatError", opts, err)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a newer journal was changed")
	}
}

func TestMissingMetaIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	rawTx(t, path, func(tx *bbolt.Tx) error { // a bbolt file, not a journal
		b, err := tx.CreateBucket([]byte(bucketProcs))
		if err == nil {
			err = b.Put([]byte("x"), []byte("y"))
		}
		return err
	})
	_, _, err := Open(path, Options{})
	wantCorrupt(t, path, err)
}

// TestVanishedRecordIsCorrupt: a record gone from a sound page tree (as
// when a flipped element count shortens a leaf) is found by the tally.
func TestVanishedRecordIsCorrupt(t *testing.T) {
	want := samples(5)
	path := fill(t, want)
	rawTx(t, path, func(tx *bbolt.Tx) error { return tx.Bucket([]byte(bucketProcs)).Delete(want[2].Key[:]) })
	_, _, err := Open(path, Options{})
	wantCorrupt(t, path, err)
	if !strings.Contains(err.Error(), "counts 5 records") {
		t.Fatalf("the error does not say what is missing: %v", err)
	}
	j, rep, err := Open(path, Options{Salvage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if rep.Processes != 4 || len(rep.Dropped) != 1 || rep.Dropped[0].Bucket != bucketProcs {
		t.Fatalf("report %+v", rep)
	}
	sameProcs(t, read(t, j).procs, append(want[:2:2], want[3:]...))
}

// TestCyclicPagesAreContained: a branch page whose child is itself sends
// bbolt's cursor into an endless descent; the checking child is stopped
// by its heap or time budget and the file is refused, the daemon unharmed.
func TestCyclicPagesAreContained(t *testing.T) {
	orig := fill(t, samples(60))
	full, _ := os.ReadFile(orig)
	branch := -1
	db, err := bbolt.Open(orig, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bbolt.Tx) error {
		for id := 2; branch < 0; id++ {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			if info.Type == "branch" {
				branch = id
			}
		}
		return nil
	})
	db.Close()
	if branch < 0 {
		t.Fatal("no branch page in a journal of 60 records")
	}
	// Page header 16 bytes; branch element: pos u32, ksize u32, pgid u64.
	binary.LittleEndian.PutUint64(full[branch*4096+16+8:], uint64(branch))
	path := filepath.Join(t.TempDir(), FileName)
	os.WriteFile(path, full, 0o600)
	_, _, err = Open(path, Options{CheckTimeout: 20 * time.Second})
	wantCorrupt(t, path, err)
	t.Log(err)
}
