package cabi

import "fmt"

// MaxTableLen is the Canonical ABI's bound on a handle table (2^28-1).
const MaxTableLen = 1<<28 - 1

// Table is a per-instance handle table following the Canonical ABI's
// Table: index 0 is reserved (never a valid handle), freed indices are
// reused from a free list (LIFO, as the reference does), and the table
// holds at most MaxTableLen entries. Each entry carries its resource type
// so that a handle of one resource type used as another traps. Not safe
// for concurrent use; callers serialise.
type Table[T any] struct {
	slots []slot[T]
	free  []uint32
	live  int
}

type slot[T any] struct {
	v    T
	rt   string
	live bool
}

// HandleError is a use of a handle that is not a live entry of the right
// resource type: the guest forged, reused or double-dropped it.
type HandleError struct {
	Resource string
	Index    uint32
	Reason   string
}

func (e *HandleError) Error() string {
	return fmt.Sprintf("%s handle %d: %s", e.Resource, e.Index, e.Reason)
}

// Add inserts v as resource type rt and returns its handle index.
func (t *Table[T]) Add(rt string, v T) (uint32, error) {
	if t.slots == nil {
		t.slots = make([]slot[T], 1, 8) // index 0: reserved
	}
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if len(t.slots) > MaxTableLen {
			return 0, &HandleError{Resource: rt, Index: uint32(len(t.slots)), Reason: "handle table full (2^28-1 entries)"}
		}
		i = uint32(len(t.slots))
		t.slots = append(t.slots, slot[T]{})
	}
	t.slots[i] = slot[T]{v: v, rt: rt, live: true}
	t.live++
	return i, nil
}

// Get returns the live entry i of resource type rt (lift_borrow).
func (t *Table[T]) Get(rt string, i uint32) (T, error) {
	var zero T
	if err := t.check(rt, i); err != nil {
		return zero, err
	}
	return t.slots[i].v, nil
}

// Remove takes entry i of resource type rt out of the table (lift_own,
// resource.drop); the index is reused later.
func (t *Table[T]) Remove(rt string, i uint32) (T, error) {
	var zero T
	if err := t.check(rt, i); err != nil {
		return zero, err
	}
	v := t.slots[i].v
	t.slots[i] = slot[T]{}
	t.free = append(t.free, i)
	t.live--
	return v, nil
}

func (t *Table[T]) check(rt string, i uint32) error {
	switch {
	case i == 0:
		return &HandleError{rt, i, "index 0 is the reserved null handle"}
	case int(i) >= len(t.slots):
		return &HandleError{rt, i, "no such handle (never created by this instance)"}
	case !t.slots[i].live:
		return &HandleError{rt, i, "already dropped"}
	case t.slots[i].rt != rt:
		return &HandleError{rt, i, "is a " + t.slots[i].rt + " handle"}
	}
	return nil
}

// Len is the number of live entries.
func (t *Table[T]) Len() int { return t.live }

// Drain removes every live entry, lowest index first, and resets the table
// to its initial state (the next Add returns 1 again).
func (t *Table[T]) Drain() []T {
	var out []T
	for i := 1; i < len(t.slots); i++ {
		if t.slots[i].live {
			out = append(out, t.slots[i].v)
		}
	}
	t.slots, t.free, t.live = nil, nil, 0
	return out
}
