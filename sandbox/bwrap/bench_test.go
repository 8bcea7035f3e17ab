package bwrap

import (
	"context"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/local"
)

// BenchmarkStartToExit compares, in one run, Start + Wait of /bin/true
// through the bwrap backend and through the plain local backend.
//
//	go test ./sandbox/bwrap -run '^$' -bench StartToExit -benchtime 200x -count 3
func BenchmarkStartToExit(b *testing.B) {
	e := newEnv(b)
	lb, err := local.New(local.Options{})
	if err != nil {
		b.Fatal(err)
	}
	spec := e.spec("")
	spec.Argv = []string{"/bin/true"}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		be   sandbox.Backend
	}{{"local", lb}, {"bwrap", e.b}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h, err := tc.be.Start(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				if ex, err := h.Wait(ctx); err != nil || ex.Code != 0 {
					b.Fatalf("%+v %v", ex, err)
				}
				b.StopTimer()
				if err := tc.be.Cleanup(ctx, h.Ref()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

var _ = time.Second
