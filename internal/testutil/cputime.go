package testutil

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime is the CPU this process used so far (user + system). On the
// loaded shared machine a benchmark's wall time is mostly waiting for a
// CPU; its CPU time per operation is the figure that compares.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports "cpu-ms/op": the process's CPU time since start
// (CPUTime at the loop's start) per iteration, every goroutine counted.
func ReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(CPUTime()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}
