package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestRedactHandler(t *testing.T) {
	id := strings.Repeat("a2", 26)
	var b bytes.Buffer
	rh := NewRedactHandler(slog.NewTextHandler(&b, nil))
	lg := slog.New(rh)
	lg.Info("before "+id, "s", id)
	if strings.Contains(b.String(), id) || !strings.Contains(b.String(), "proc:?") {
		t.Fatalf("before the hasher: %q", b.String())
	}
	rh.SetHasher(func(string) string { return "h4sh" })
	b.Reset()
	lg.With("w", "x-"+id).WithGroup("g").Info("msg "+id, "err", errors.New("no "+id), "grp", slog.GroupValue(slog.String("in", id)), "bytes", []byte(id), "short", "abc")
	out := b.String()
	if strings.Contains(out, id) {
		t.Fatalf("an ID leaked: %q", out)
	}
	for _, want := range []string{"msg proc:h4sh", "w=x-proc:h4sh", `g.err="no proc:h4sh"`, "g.grp.in=proc:h4sh", "g.bytes=proc:h4sh", "g.short=abc"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q: %q", want, out)
		}
	}
}

func TestRedactLeavesLongerRuns(t *testing.T) {
	rh := NewRedactHandler(slog.NewTextHandler(&bytes.Buffer{}, nil))
	long := strings.Repeat("a", 60)
	if got := rh.redact(long); got != long {
		t.Fatalf("a 60-character run is not an ID: %q", got)
	}
}
