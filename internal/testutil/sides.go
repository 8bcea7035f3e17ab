package testutil

import (
	"slices"
	"testing"
	"time"
)

// A Side is one side of an anchor comparison (ours, or what a user would
// pick instead): a name for the metrics, one timed run, and what to do
// after it untimed (release what the run left, so the next run starts
// from the same state).
type Side struct {
	Name  string
	Run   func() error
	After func() error
}

// Interleave runs every side rounds times per benchmark iteration,
// rotating the order each round so that no side always follows the same
// other one, and returns each side's times. Both sides of a pair thus see
// the same machine load, which on a shared machine matters more than the
// number of samples.
func Interleave(b *testing.B, sides []Side, rounds int) [][]time.Duration {
	times := make([][]time.Duration, len(sides))
	i := 0
	for b.Loop() {
		for range rounds {
			for k := range sides {
				j := (k + i) % len(sides)
				start := time.Now()
				if err := sides[j].Run(); err != nil {
					b.Fatalf("%s: %v", sides[j].Name, err)
				}
				times[j] = append(times[j], time.Since(start))
				if sides[j].After != nil {
					if err := sides[j].After(); err != nil {
						b.Fatalf("%s: after the run: %v", sides[j].Name, err)
					}
				}
			}
			i++
		}
	}
	return times
}

// ReportSide reports a side's median as "<name>-<unit>" and its
// interquartile range as "<name>-iqr-<unit>" (unit "ns", "µs" or "ms"),
// the pair internal/benchdoc reads for its anchor table, and returns the
// median in that unit.
func ReportSide(b *testing.B, name, unit string, d []time.Duration) float64 {
	med, iqr := MedianIQR(d, unitOf(unit))
	b.ReportMetric(med, name+"-"+unit)
	b.ReportMetric(iqr, name+"-iqr-"+unit)
	return med
}

// ReportSides is ReportSide for every side of an Interleave, returning
// the medians by name.
func ReportSides(b *testing.B, unit string, sides []Side, times [][]time.Duration) map[string]float64 {
	med := map[string]float64{}
	for j, s := range sides {
		med[s.Name] = ReportSide(b, s.Name, unit, times[j])
	}
	return med
}

// MedianIQR is the median and the interquartile range of d in units of
// per (0 for no samples).
func MedianIQR(d []time.Duration, per time.Duration) (med, iqr float64) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1)+0.5)]) / float64(per) }
	return q(0.5), q(0.75) - q(0.25)
}

func unitOf(u string) time.Duration {
	switch u {
	case "ns":
		return time.Nanosecond
	case "µs", "us":
		return time.Microsecond
	case "s":
		return time.Second
	default:
		return time.Millisecond
	}
}
