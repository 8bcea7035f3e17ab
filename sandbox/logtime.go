package sandbox

import "time"

// Mark says the bytes of a stream from offset Off on, up to the next mark,
// were captured at Time (unix nanoseconds). It is what `logs --since`,
// `--timestamps` and the merged stdout+stderr order are built on.
type Mark struct {
	Off  int64 `json:"o"`
	Time int64 `json:"t"`
}

// A stream's time index is bounded: writes within markCoalesce of the last
// mark share it (a flood costs no marks), and at maxMarks the older half is
// thinned pairwise, so old bytes keep a time, only a coarser one (the time
// of an earlier write, never a later one). 16 KiB per stream at most.
const (
	maxMarks     = 1024
	markCoalesce = time.Millisecond
)

// markIndex is an OutputLog's time index; the log's mutex guards it.
type markIndex struct{ m []Mark }

// add records that the write starting at off happened at now.
func (x *markIndex) add(off int64, now time.Time) {
	t := now.UnixNano()
	if n := len(x.m); n > 0 && t-x.m[n-1].Time < int64(markCoalesce) {
		return
	}
	if len(x.m) == maxMarks {
		half := maxMarks / 2
		k := 0
		for i := 0; i < half; i += 2 {
			x.m[k] = x.m[i]
			k++
		}
		k += copy(x.m[k:], x.m[half:])
		x.m = x.m[:k]
	}
	x.m = append(x.m, Mark{Off: off, Time: t})
}

// trim forgets marks wholly below low (the lowest retained offset), keeping
// the one that covers low.
func (x *markIndex) trim(low int64) {
	i := 0
	for i+1 < len(x.m) && x.m[i+1].Off <= low {
		i++
	}
	if i > 0 {
		x.m = append(x.m[:0], x.m[i:]...)
	}
}

// span returns the marks covering [off, end): the first is clamped to off.
// Bytes before the first returned mark have no recorded time (written
// before this index existed, e.g. by a keeper that restarted).
func (x *markIndex) span(off, end int64) []Mark {
	if end <= off {
		return nil
	}
	var out []Mark
	for i, m := range x.m {
		if m.Off >= end {
			break
		}
		if i+1 < len(x.m) && x.m[i+1].Off <= off {
			continue
		}
		m.Off = max(m.Off, off)
		out = append(out, m)
	}
	return out
}
