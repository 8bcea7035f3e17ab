package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// SpillDir is a private (0700) per-process directory for spill files,
// created on first use inside an existing parent. Safe for concurrent use.
type SpillDir struct {
	parent string
	mu     sync.Mutex
	path   string
	err    error
}

// NewSpillDir checks parent (absolute, an existing directory) now and
// creates the private directory inside it only when a log first needs it,
// or when Path is called.
func NewSpillDir(parent string) (*SpillDir, error) {
	if err := checkSpillParent(parent); err != nil {
		return nil, err
	}
	return &SpillDir{parent: parent}, nil
}

// Path creates the directory on first call and returns it.
func (d *SpillDir) Path() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" && d.err == nil {
		d.path, d.err = makeSpillDir(d.parent)
	}
	return d.path, d.err
}

// Created returns the directory if it was created ("" otherwise).
func (d *SpillDir) Created() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.path
}

// Remove removes the directory and its files, if it was created.
func (d *SpillDir) Remove() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" {
		return nil
	}
	if err := os.RemoveAll(d.path); err != nil {
		return fmt.Errorf("remove spill dir: %w", err)
	}
	return nil
}

// Spill file format (version 1), little endian. The file alone, with its
// header, is the source of truth for the stream's last SpillBytes bytes, so
// a later host can reopen a log whose writer it did not start:
//
//	0  [8]byte  magic "CAPSLOG\x00"
//	8  uint32   version (1)
//	12 uint32   flags (bit 0: closed, the writer saw EOF)
//	16 uint64   capacity C of the data region
//	24 uint64   start: lowest absolute offset held in the file
//	32 uint64   end: absolute offset after the last byte written
//	40 [24]byte reserved (zero)
//	64 data: the byte at absolute offset o is at 64 + o mod C, for start <= o < end
//
// The header is rewritten after about every MiB of data and when the
// stream closes; a reader of the file trusts only what the header covers.
// While the stream is open the data region keeps wrapping after the header
// was written, so an open stream's header leaves out the oldest bytes that
// the writes up to the next header may overwrite (see writeHeader).
const (
	spillMagic      = "CAPSLOG\x00"
	spillVersion    = 1
	spillHeaderSize = 64
	spillFlagClosed = 1
)

// headerEvery bounds how far the spill header may lag behind the data.
const headerEvery = 1 << 20

// openSpill creates the spill file at l.spillPath and writes its header.
func (l *OutputLog) openSpill() error {
	f, err := os.OpenFile(l.spillPath, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("output log: create spill: %w", err)
	}
	l.spill = f
	if err := l.writeHeader(headerEvery); err != nil {
		os.Remove(l.spillPath)
		return err
	}
	return nil
}

// lazySpillLocked creates a lazy spill file before the first byte lands.
// A failure is a spill failure: reported, and the bytes stay in the ring.
func (l *OutputLog) lazySpillLocked() error {
	if l.lazyDir == nil {
		return nil
	}
	d := l.lazyDir
	l.lazyDir = nil
	dir, err := d.Path()
	if err != nil {
		return l.failSpill(err)
	}
	l.spillPath = filepath.Join(dir, l.lazyName)
	if err := l.openSpill(); err != nil {
		return l.failSpill(err)
	}
	return nil
}

// makeSpillDir creates a private (0700) directory for one process's spill
// files inside parent.
func makeSpillDir(parent string) (string, error) {
	d, err := os.MkdirTemp(parent, "proc-")
	if err != nil {
		return "", fmt.Errorf("spill dir: %w", err)
	}
	if err := os.Chmod(d, 0o700); err != nil {
		os.Remove(d)
		return "", fmt.Errorf("spill dir: %w", err)
	}
	return d, nil
}

func checkSpillParent(parent string) error {
	if !filepath.IsAbs(parent) {
		return fmt.Errorf("spill dir %q is not absolute: %w", parent, ErrInvalidSpec)
	}
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		if err == nil {
			err = syscall.ENOTDIR
		}
		return fmt.Errorf("spill dir %q: %v: %w", parent, err, ErrInvalidSpec)
	}
	return nil
}

// writeHeader writes the spill header; callers hold mu (or own l). room
// is how many bytes may be written before the next header.
func (l *OutputLog) writeHeader(room int64) error {
	h := l.header[:]
	copy(h, spillMagic)
	binary.LittleEndian.PutUint32(h[8:], spillVersion)
	var flags uint32
	if l.closed {
		flags |= spillFlagClosed
	}
	binary.LittleEndian.PutUint32(h[12:], flags)
	binary.LittleEndian.PutUint64(h[16:], uint64(l.spillCap))
	binary.LittleEndian.PutUint64(h[24:], uint64(l.headerStart(room)))
	binary.LittleEndian.PutUint64(h[32:], uint64(l.end))
	if _, err := l.spill.WriteAt(h, 0); err != nil {
		return l.freezeSpill(err)
	}
	l.headerAt, l.headerRoom = l.end, room
	return nil
}

// headerStart is the start offset a header may claim when up to room more
// bytes can be written before the next header: those bytes overwrite the
// slots of the oldest room bytes, which a reader of the file alone must
// then not trust. A closed stream gets no more bytes: its start is exact.
func (l *OutputLog) headerStart(room int64) int64 {
	if l.closed {
		return l.spillStart
	}
	return min(l.end, max(l.spillStart, l.end+room-l.spillCap))
}

// failSpill records a failed read of the spill: the file is no longer
// trusted, so bytes outside the ring are from now on counted as dropped,
// and the error is reported by Err and by every read that hits the loss.
func (l *OutputLog) failSpill(err error) error {
	if l.spillErr == nil {
		l.spillErr = fmt.Errorf("output spill %s: %w", l.spillPath, err)
	}
	if l.spill != nil {
		l.spill.Close()
		l.spill = nil
	}
	return l.spillErr
}

// freezeSpill records a failed write (the disk is full or failing): the
// spill takes no more bytes, and the ones it took before, up to the
// current end, are still read from it. Bytes of the failed write itself
// (perhaps partly written) are not trusted. A frozen spill's error is
// reported with every read that hits the loss after it.
func (l *OutputLog) freezeSpill(err error) error {
	if l.spillErr == nil {
		l.spillErr = fmt.Errorf("output spill %s: %w", l.spillPath, err)
		l.spillHigh = l.end
	}
	return l.spillErr
}

func (l *OutputLog) spillWrite(p []byte) error {
	q, off := p, l.end
	if int64(len(q)) > l.spillCap {
		off += int64(len(q)) - l.spillCap
		q = q[int64(len(q))-l.spillCap:]
	}
	for len(q) > 0 {
		pos := off % l.spillCap
		n := min(int64(len(q)), l.spillCap-pos)
		if _, err := l.spill.WriteAt(q[:n], spillHeaderSize+pos); err != nil {
			return l.freezeSpill(err)
		}
		q, off = q[n:], off+n
	}
	if newEnd := l.end + int64(len(p)); newEnd-l.spillStart > l.spillCap {
		l.spillStart = newEnd - l.spillCap
	}
	return nil
}

func (l *OutputLog) spillRead(dst []byte, off int64) error {
	for len(dst) > 0 {
		pos := off % l.spillCap
		n := min(int64(len(dst)), l.spillCap-pos)
		if _, err := l.spill.ReadAt(dst[:n], spillHeaderSize+pos); err != nil {
			return l.failSpill(err)
		}
		dst, off = dst[n:], off+n
	}
	return nil
}

// OpenOutputLog reopens a spill file written by an earlier OutputLog (for
// example by a host that has since restarted), read-only: the stream is
// closed (no writer will append), its bytes are served from the file, and
// everything before the header's start is reported as dropped. The file is
// the source of truth: only what its header covers is trusted. Remove
// deletes it.
func OpenOutputLog(path string) (*OutputLog, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open output log: %w", err)
	}
	var h [spillHeaderSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("open output log %s: header: %w", path, err)
	}
	le := binary.LittleEndian
	ver, capacity, start, end := le.Uint32(h[8:]), int64(le.Uint64(h[16:])), int64(le.Uint64(h[24:])), int64(le.Uint64(h[32:]))
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open output log: %w", err)
	}
	switch {
	case string(h[:8]) != spillMagic:
		err = errors.New("bad magic")
	case ver != spillVersion:
		err = fmt.Errorf("version %d", ver)
	case capacity <= 0 || start < 0 || start > end || end-start > capacity:
		err = fmt.Errorf("inconsistent header (capacity %d, start %d, end %d)", capacity, start, end)
	case st.Size() < spillHeaderSize+min(capacity, end):
		err = fmt.Errorf("file is %d bytes, header covers more", st.Size())
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open output log %s: %w: %w", path, ErrSpill, err)
	}
	return &OutputLog{
		ringCap:    1, // empty ring: every read comes from the file
		blocks:     make([][]byte, 1),
		start:      end,
		end:        end,
		overflow:   DropOldest,
		spill:      f,
		spillPath:  path,
		spillCap:   capacity,
		spillStart: start,
		headerAt:   end,
		closed:     true,
		drainCur:   start,
	}, nil
}
