package main

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A Curve is one metric of a scale benchmark: sub-benchmarks named
// <bench>/<side>-<N> (BenchmarkKeeperMemory/keeper-100 and
// BenchmarkKeeperMemory/tmux-100 are two sides at N = 100), one line per
// side over N. Issue 16 asks for these curves (memory, fds, latency
// against tmux for growing N) as plots, not only as table rows.
type Curve struct {
	Pkg, Bench, Unit string
	Sides            []Side // in order of first appearance
}

// A Side is one line of a curve: its points in increasing N.
type Side struct {
	Name   string
	Points []Point
}

// A Point is the median of every run at one N (go test -count repeats a
// name), with the spread of those runs.
type Point struct {
	N             int
	Median        float64
	Min, Max      float64
	Runs          int
	MedianCaption string
}

// scaleName splits "BenchmarkX/side-N" into ("BenchmarkX", "side", N).
func scaleName(name string) (bench, side string, n int, ok bool) {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return "", "", 0, false
	}
	sub := name[i+1:]
	j := strings.LastIndexByte(sub, '-')
	if j <= 0 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(sub[j+1:])
	if err != nil || n <= 0 || strconv.Itoa(n) != sub[j+1:] {
		return "", "", 0, false
	}
	return name[:i], sub[:j], n, true
}

// Curves finds the scale curves of a run: every (package, benchmark,
// unit) whose sub-benchmarks follow <side>-<N> with at least two N for
// some side. ns/op is left out when the benchmark reports units of its
// own: there it times the set-up of N processes, not what is measured.
func Curves(run Run) []Curve {
	var out []Curve
	for _, p := range run.Packages {
		type key struct{ bench, unit string }
		vals := map[key]map[string]map[int][]float64{}
		sides := map[key][]string{}
		var order []key
		custom := map[string]bool{}
		for _, r := range p.Results {
			bench, side, n, ok := scaleName(r.Name)
			if !ok {
				continue
			}
			for _, m := range r.Metrics {
				if !slices.Contains(standardUnits, m.Unit) {
					custom[bench] = true
				}
				k := key{bench, m.Unit}
				if vals[k] == nil {
					vals[k] = map[string]map[int][]float64{}
					order = append(order, k)
				}
				if vals[k][side] == nil {
					vals[k][side] = map[int][]float64{}
					sides[k] = append(sides[k], side)
				}
				vals[k][side][n] = append(vals[k][side][n], m.Value)
			}
		}
		for _, k := range order {
			if k.unit == "ns/op" && custom[k.bench] || strings.Contains(k.unit, "-iqr-") {
				continue // set-up time, or a spread (testutil.ReportSide): not a curve of its own
			}
			c := Curve{Pkg: p.Path, Bench: k.bench, Unit: k.unit}
			wide := false
			for _, s := range sides[k] {
				sd := Side{Name: s, Points: points(vals[k][s])}
				wide = wide || len(sd.Points) >= 2
				c.Sides = append(c.Sides, sd)
			}
			if wide {
				out = append(out, c)
			}
		}
	}
	return out
}

// points turns N → runs into points sorted by N.
func points(byN map[int][]float64) []Point {
	var ps []Point
	for n, vs := range byN {
		s := slices.Clone(vs)
		sort.Float64s(s)
		med := s[len(s)/2]
		if len(s)%2 == 0 {
			med = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
		ps = append(ps, Point{N: n, Median: med, Min: s[0], Max: s[len(s)-1], Runs: len(s), MedianCaption: strconv.FormatFloat(med, 'g', 4, 64)})
	}
	slices.SortFunc(ps, func(a, b Point) int { return a.N - b.N })
	return ps
}

// curveTable writes c as a Markdown table: one row per N, one column per
// side (median, with min–max when there were several runs), and the
// ratio of the first side to each other one, so a goal like "≤ 4× tmux"
// reads straight off it.
func curveTable(b *strings.Builder, c Curve) {
	var ns []int
	for _, s := range c.Sides {
		for _, p := range s.Points {
			if !slices.Contains(ns, p.N) {
				ns = append(ns, p.N)
			}
		}
	}
	slices.Sort(ns)
	b.WriteString("| N |")
	for _, s := range c.Sides {
		fmt.Fprintf(b, " %s |", cell(s.Name))
	}
	for _, s := range c.Sides[1:] {
		fmt.Fprintf(b, " %s/%s |", cell(c.Sides[0].Name), cell(s.Name))
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", 2*len(c.Sides)-1) + "\n")
	for _, n := range ns {
		fmt.Fprintf(b, "| %d |", n)
		meds := make([]*Point, len(c.Sides))
		for i, s := range c.Sides {
			for j := range s.Points {
				if s.Points[j].N == n {
					meds[i] = &s.Points[j]
				}
			}
			b.WriteString(" " + pointCell(meds[i]) + " |")
		}
		for i := range c.Sides[1:] {
			if meds[0] != nil && meds[i+1] != nil && meds[i+1].Median != 0 {
				fmt.Fprintf(b, " %.3g× |", meds[0].Median/meds[i+1].Median)
			} else {
				b.WriteString("  |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func pointCell(p *Point) string {
	switch {
	case p == nil:
		return ""
	case p.Runs > 1:
		return fmt.Sprintf("%s (%.4g–%.4g, %d runs)", p.MedianCaption, p.Min, p.Max, p.Runs)
	default:
		return p.MedianCaption
	}
}

// plotFile is the PNG a curve is drawn into, named from its benchmark and
// unit with everything but letters and digits folded to '-'.
func plotFile(c Curve) string {
	name := strings.TrimPrefix(c.Bench, "Benchmark") + "-" + c.Unit
	var sb strings.Builder
	dash := false
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		switch {
		case ok:
			sb.WriteRune(r)
			dash = false
		case !dash:
			sb.WriteByte('-')
			dash = true
		}
	}
	return "bench-" + strings.ToLower(strings.Trim(sb.String(), "-")) + ".png"
}
