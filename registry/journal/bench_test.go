package journal

import (
	"path/filepath"
	"testing"
)

// BenchmarkPutProcess is one journaled spawn: a fsync'd transaction.
func BenchmarkPutProcess(b *testing.B) {
	j, _ := openT(b, filepath.Join(b.TempDir(), FileName), Options{})
	defer j.Close()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := j.PutProcess(sample(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen1000 is a daemon start on a journal of 1,000 processes:
// the checking child, the decode of every record, the open for writing
// and the meta update (and Close's, which a start does not pay).
func BenchmarkOpen1000(b *testing.B) {
	path := fill(b, samples(1000))
	b.ResetTimer()
	for b.Loop() {
		j, rep := openT(b, path, Options{})
		if rep.Processes != 1000 {
			b.Fatalf("report %+v", rep)
		}
		j.Close()
	}
}
