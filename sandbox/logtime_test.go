package sandbox

import (
	"testing"
	"time"
)

// The index stays bounded, covers every retained byte, and times never
// go later than the write that began them.
func TestMarkIndexBoundedAndCovering(t *testing.T) {
	var x markIndex
	t0 := time.Unix(1000, 0)
	for i := range 5000 {
		x.add(int64(i*10), t0.Add(time.Duration(i)*2*time.Millisecond))
	}
	if len(x.m) > maxMarks {
		t.Fatalf("%d marks, want <= %d", len(x.m), maxMarks)
	}
	sp := x.span(0, 50000)
	if len(sp) == 0 || sp[0].Off != 0 {
		t.Fatalf("span does not start at 0: %v", sp[:1])
	}
	for i := 1; i < len(sp); i++ {
		if sp[i].Off <= sp[i-1].Off || sp[i].Time < sp[i-1].Time {
			t.Fatalf("marks out of order at %d: %v %v", i, sp[i-1], sp[i])
		}
	}
	last := sp[len(sp)-1]
	if last.Off != 49990 {
		t.Fatalf("newest mark %v, want offset 49990 kept exactly", last)
	}
	x.trim(30000)
	if sp := x.span(30000, 30010); len(sp) != 1 || sp[0].Off != 30000 {
		t.Fatalf("after trim, span(30000) = %v", sp)
	}
}
