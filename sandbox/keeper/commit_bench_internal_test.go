package keeper

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/capsule-host/capsule-host/internal/atomicfile"
)

// BenchmarkExitFlush is RFC §16's choice between the designs of a durable
// exit record, one record each, on the filesystem of os.TempDir (the
// state directory's in the tests): the old fsync pair (file, then
// directory), the group commit's flush (an unsynced rename, then syncfs),
// and the rejected exit log (an append, then fdatasync). A burst pays one
// of these per record (fsync pair) or two or three in all (the others).
//
//	go test -run '^$' -bench ExitFlush -benchtime 20x ./sandbox/keeper
func BenchmarkExitFlush(b *testing.B) {
	rec := make([]byte, 200)
	b.Run("fsync-pair", func(b *testing.B) {
		dir := b.TempDir()
		for i := range b.N {
			d := recordDir(b, dir, i)
			if err := atomicfile.Write(filepath.Join(d, exitFile), rec, 0o600, atomicfile.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("syncfs", func(b *testing.B) {
		dir := b.TempDir()
		g, err := newGroupCommit(dir)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(g.fd)
		for i := range b.N {
			d := recordDir(b, dir, i)
			if err := atomicfile.Write(filepath.Join(d, exitFile), rec, 0o600, atomicfile.Options{NoSync: true}); err != nil {
				b.Fatal(err)
			}
			if err := g.sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("log-fdatasync", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "exits.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		for range b.N {
			if _, err := f.Write(rec); err != nil {
				b.Fatal(err)
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func recordDir(b *testing.B, dir string, i int) string {
	d := filepath.Join(dir, fmt.Sprint(i))
	if err := os.Mkdir(d, 0o700); err != nil {
		b.Fatal(err)
	}
	return d
}
