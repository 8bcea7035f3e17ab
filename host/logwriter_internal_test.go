package host

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// A guest flooding its log is cut to the capsule's rate, and every line
// is accounted for: the lines logged plus the drops reported add up to
// the lines written, across two instances sharing the capsule's limit.
// The flood (10,000 lines against a burst of 100 at 10/s) cannot all pass
// however slow the machine, so the test does not depend on timing.
func TestGuestLogRateLimit(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	lim := newLogLimit(log, 10, 100)
	a, b := newLineLog(log, "stdout", lim), newLineLog(log, "stderr", lim)
	const n = 10000
	for i := range n {
		w := a
		if i%2 == 1 {
			w = b
		}
		w.Write([]byte("flood line\n"))
	}
	a.flush()
	var lines, reported int64
	for _, rec := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(rec), &m); err != nil {
			t.Fatalf("record %q: %v", rec, err)
		}
		if d, ok := m["dropped"].(float64); ok {
			reported += int64(d)
		} else {
			lines++
		}
	}
	if lines+reported != n || reported != lim.Dropped() || reported == 0 {
		t.Fatalf("%d lines logged + %d reported dropped (limit counted %d), want a sum of %d with drops", lines, reported, lim.Dropped(), n)
	}
	if lines > n/2 {
		t.Fatalf("%d of %d lines logged: the rate did not hold", lines, n)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
