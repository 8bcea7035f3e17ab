package host_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/internal/testutil"
)

// Fairness between principals: eve floods a 4-instance pool with calls
// that each hold an instance for evePins; alice's calls must still be
// served while eve saturates it. The bound asserted is structural, not a
// speed: alice's deadline is half of evePins, so a call that waited for
// any of eve's instances to free cannot meet it; only a slot eve cannot
// hold can. The control leg (max_per_principal = max, no share) shows
// that the same flood does starve her: the test would catch a regression.
func TestPoolFairAcrossPrincipals(t *testing.T) {
	const evePins, aliceDeadline = 5 * time.Second, 2500 * time.Millisecond
	for _, tc := range []struct {
		name    string
		pool    string
		eveHold int // instances eve holds at saturation
		starves bool
	}{
		{"default share", "[pool]\nmin_idle = 0\nmax = 4\n", 2, false},
		{"no share (control)", "[pool]\nmin_idle = 0\nmax = 4\nmax_per_principal = 4\n", 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newHost(t, func(c *host.Config) { c.CallTimeout = time.Minute })
			c := load(t, e, "tools", tc.pool)
			// eve's flood: 4× the pool
			t.Cleanup(testutil.Repeat(16, func() bool {
				ctx, cancel := context.WithTimeout(host.WithPrincipal(context.Background(), "eve"), evePins)
				e.h.Call(ctx, "tools", "spin", "{}")
				cancel()
				return true
			}))
			waitFor(t, func() bool { return c.Stats().Busy == tc.eveHold })
			served, slowest := 0, time.Duration(0)
			for i := 0; i < 5; i++ {
				ctx, cancel := context.WithTimeout(host.WithPrincipal(context.Background(), "alice"), aliceDeadline)
				t0 := time.Now()
				_, err := e.h.Call(ctx, "tools", "noop", "{}")
				slowest = max(slowest, time.Since(t0))
				cancel()
				var te *host.TimeoutError
				switch {
				case err == nil:
					served++
				case errors.As(err, &te) && te.Waiting:
				default:
					t.Fatalf("alice's call %d: %v", i, err)
				}
				if tc.starves {
					break // one timeout shows it; five would take 12 s
				}
			}
			if busy := c.Stats().Busy; busy < tc.eveHold {
				t.Fatalf("eve's flood stopped saturating (busy %d): the test proves nothing", busy)
			}
			got := fmt.Sprintf("alice served %d of her calls (slowest %v)", served, slowest)
			if tc.starves && served != 0 || !tc.starves && served != 5 {
				t.Fatalf("%s with eve holding %d of 4 instances (starves: %v)", got, tc.eveHold, tc.starves)
			}
			t.Log(got)
		})
	}
}
