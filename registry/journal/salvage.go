package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
	"go.etcd.io/bbolt"
)

// found is what the check's records decoded to.
type found struct {
	meta     *meta
	good     []dumpLine // decodable records, as stored
	problems []dumpLine // structural problems of the file
}

// classify decodes every record the check streamed. Undecodable records go
// to rep.Dropped; structural problems (and a missing or undecodable meta
// record or bucket) make a *CorruptError; a newer format is a
// *FormatError at once.
func classify(path string, res checkResult, rep *Report) (found, error) {
	f := found{problems: res.problems}
	for _, l := range res.records {
		err := classifyRecord(path, l, &f, rep)
		var fe *FormatError
		if errors.As(err, &fe) {
			return f, err
		}
		if err != nil {
			rep.Dropped = append(rep.Dropped, recordErr(l.Bucket, l.Key, err))
		}
	}
	if len(f.problems) == 0 {
		f.problems = completeness(res, f.meta, rep.Dropped)
	}
	if len(f.problems) > 0 {
		return f, &CorruptError{Path: path, Err: errProblems(f.problems)}
	}
	return f, nil
}

// completeness checks, for a file whose pages read without trouble, that
// the journal is all there: its buckets, its meta record, and in each data
// bucket as many records as the meta record's tally counts. A different
// digest with the right count is explained by the bucket's dropped
// records (a damaged record is reported, not fatal); without one, a
// record changed under a valid checksum, and the file is not trusted.
func completeness(res checkResult, m *meta, dropped []*RecordError) []dumpLine {
	var ps []dumpLine
	for _, name := range []string{bucketMeta, bucketProcs, bucketScopes} {
		if !slices.Contains(res.buckets, name) {
			ps = append(ps, dumpLine{Bucket: name, Problem: "the bucket is missing"})
		}
	}
	if m == nil {
		return append(ps, dumpLine{Bucket: bucketMeta, Problem: "no meta record"})
	}
	var seen meta
	for _, l := range res.records {
		if t := seen.tallyOf(l.Bucket); t != nil {
			t.add(l.Bucket, l.Key, l.Value)
		}
	}
	for _, name := range []string{bucketProcs, bucketScopes} {
		want, got := *m.tallyOf(name), *seen.tallyOf(name)
		explained := slices.ContainsFunc(dropped, func(d *RecordError) bool { return d.Bucket == name })
		if want.N != got.N || want.Digest != got.Digest && !explained {
			ps = append(ps, dumpLine{Bucket: name, Problem: fmt.Sprintf("the meta record counts %d records (digest %016x), the bucket holds %d (digest %016x): records were lost or changed", want.N, want.Digest, got.N, got.Digest)})
		}
	}
	return ps
}

// classifyRecord decodes one record into f (counting it in rep), or says
// why it cannot be used.
func classifyRecord(path string, l dumpLine, f *found, rep *Report) error {
	if l.Nested {
		return fmt.Errorf("%w: a nested bucket where a record belongs", ErrMalformed)
	}
	switch l.Bucket {
	case bucketMeta:
		if string(l.Key) != keyMeta {
			return fmt.Errorf("%w: unexpected key in the meta bucket", ErrMalformed)
		}
		m, err := decodeMeta(path, l.Value)
		var fe *FormatError
		if errors.As(err, &fe) {
			return err
		}
		if err != nil {
			f.problems = append(f.problems, dumpLine{Bucket: bucketMeta, Key: l.Key, Problem: "meta record: " + err.Error()})
			return nil
		}
		f.meta = &m
		return nil
	case bucketProcs:
		if _, err := DecodeProcess(l.Key, l.Value); err != nil {
			return err
		}
		rep.Processes++
	case bucketScopes:
		if _, _, err := decodeScope(l.Key, l.Value); err != nil {
			return err
		}
		rep.Scopes++
	default:
		return ErrUnknownBucket
	}
	f.good = append(f.good, l)
	return nil
}

// salvage replaces a corrupt journal with a fresh one holding every
// decodable record. The corrupt file is hard-linked aside first and only
// then replaced (by create's atomic rename), so a failure at any step
// leaves journal.db corrupt, as it was — never missing, which the next
// start would take for a first start.
func salvage(path string, opts Options, f found, ce *CorruptError, rep *Report) error {
	aside := path + ".corrupt-" + opts.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Link(path, aside); err != nil {
		return fmt.Errorf("journal: salvage: keeping the corrupt file as %s: %w", aside, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("journal: salvage: %w", err)
	}
	m := meta{Format: formatVersion, Created: opts.Now()}
	if f.meta != nil {
		m = *f.meta
	}
	m.Procs, m.Scopes = tally{}, tally{}
	for _, l := range f.good {
		m.tallyOf(l.Bucket).add(l.Bucket, l.Key, l.Value)
	}
	seed := func(tx *bbolt.Tx) error {
		for _, l := range f.good {
			if err := tx.Bucket([]byte(l.Bucket)).Put(l.Key, l.Value); err != nil {
				return err
			}
		}
		return nil
	}
	if err := create(path, opts, m, seed); err != nil {
		return fmt.Errorf("journal: salvage (the corrupt journal is unchanged, also at %s): %w", aside, err)
	}
	rep.Salvaged, rep.MovedAside, rep.Corruption = true, aside, ce
	for _, p := range f.problems {
		rep.Dropped = append(rep.Dropped, problemErr(p))
	}
	return nil
}
