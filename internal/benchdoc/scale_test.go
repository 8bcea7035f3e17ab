package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const scaleInput = `goos: linux
goarch: amd64
pkg: github.com/x/m/sandbox/keeper
BenchmarkKeeperMemory/keeper-10-2         	       1	 208174856 ns/op	        31.56 KiB-rss/proc	         5.000 fds/proc
BenchmarkKeeperMemory/tmux-10-2           	       1	1646848253 ns/op	         1.778 KiB-rss/proc	         1.000 fds/proc
BenchmarkKeeperMemory/keeper-100-2        	       1	 906188249 ns/op	        30.80 KiB-rss/proc	         5.000 fds/proc
BenchmarkKeeperMemory/keeper-100-2        	       1	 906188249 ns/op	        28.00 KiB-rss/proc	         5.000 fds/proc
BenchmarkKeeperMemory/keeper-100-2        	       1	 906188249 ns/op	        40.00 KiB-rss/proc	         5.000 fds/proc
BenchmarkKeeperMemory/tmux-100-2          	       1	6099494084 ns/op	         5.244 KiB-rss/proc	         1.000 fds/proc
BenchmarkSpawn/one-2                      	      10	    100000 ns/op
BenchmarkSpawnScale/local-10-2            	      10	    100000 ns/op
BenchmarkSpawnScale/local-100-2           	      10	    120000 ns/op
BenchmarkOnlyOne/local-10-2               	      10	    120000 ns/op
ok  	github.com/x/m/sandbox/keeper	12.0s
`

// TestCurves: side-N sub-benchmarks become curves per unit (ns/op left
// out where the benchmark reports its own units), repeated runs give the
// median and spread, and names without two N are no curve.
func TestCurves(t *testing.T) {
	run, err := Parse(strings.NewReader(scaleInput))
	if err != nil {
		t.Fatal(err)
	}
	cs := Curves(run)
	var got []string
	for _, c := range cs {
		got = append(got, c.Bench+" "+c.Unit)
	}
	want := []string{"BenchmarkKeeperMemory KiB-rss/proc", "BenchmarkKeeperMemory fds/proc", "BenchmarkSpawnScale ns/op"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("curves %q, want %q", got, want)
	}
	k := cs[0]
	if len(k.Sides) != 2 || k.Sides[0].Name != "keeper" || k.Sides[1].Name != "tmux" {
		t.Fatalf("sides %+v", k.Sides)
	}
	p := k.Sides[0].Points[1]
	if p.N != 100 || p.Median != 30.80 || p.Min != 28 || p.Max != 40 || p.Runs != 3 {
		t.Fatalf("keeper at 100: %+v, want median 30.8 of 3 runs, 28–40", p)
	}
	var b strings.Builder
	curveTable(&b, k)
	for _, w := range []string{"| N | keeper | tmux | keeper/tmux |", "| 10 | 31.56 | 1.778 | 17.8× |", "| 100 | 30.8 (28–40, 3 runs) | 5.244 | 5.87× |"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
}

func TestScaleName(t *testing.T) {
	for _, tc := range []struct {
		in          string
		bench, side string
		n           int
		ok          bool
	}{
		{"BenchmarkX/keeper-10", "BenchmarkX", "keeper", 10, true},
		{"BenchmarkX/a/tmux-500", "BenchmarkX/a", "tmux", 500, true},
		{"BenchmarkX/my-side-5", "BenchmarkX", "my-side", 5, true},
		{"BenchmarkX-10", "", "", 0, false},
		{"BenchmarkX/keeper", "", "", 0, false},
		{"BenchmarkX/keeper-0", "", "", 0, false},
		{"BenchmarkX/keeper-010", "", "", 0, false},
		{"BenchmarkX/-10", "", "", 0, false},
		{"BenchmarkX/keeper-+1", "", "", 0, false},
	} {
		b, s, n, ok := scaleName(tc.in)
		if b != tc.bench || s != tc.side || n != tc.n || ok != tc.ok {
			t.Errorf("scaleName(%q) = %q %q %d %v", tc.in, b, s, n, ok)
		}
	}
}

func FuzzScaleName(f *testing.F) {
	for _, s := range []string{"BenchmarkX/keeper-10", "a/b-1", "/-", "x/y-99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, side, n, ok := scaleName(s)
		if ok && (n <= 0 || b+"/"+side+"-"+strconv.Itoa(n) != s) {
			t.Fatalf("scaleName(%q) = %q %q %d: does not rebuild the name", s, b, side, n)
		}
	})
}

// TestDrawCurve draws real PNGs with gonum/plot, one per curve, and the
// document links each by the name it was written under.
func TestDrawCurve(t *testing.T) {
	run, err := Parse(strings.NewReader(scaleInput))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range Curves(run) {
		if err := drawCurve(dir, c); err != nil {
			t.Fatalf("%s %s: %v", c.Bench, c.Unit, err)
		}
		f, err := os.Open(filepath.Join(dir, plotFile(c)))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 100 {
			t.Fatalf("%s: %v, bounds %v", plotFile(c), err, img)
		}
	}
	var b strings.Builder
	if err := Render(&b, Env{Module: "github.com/x/m", Benchtime: "2s", Plots: true}, run); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "](bench-keepermemory-kib-rss-proc.png)") || !strings.Contains(b.String(), "## Scale curves") {
		t.Fatalf("document lacks the plot link:\n%s", b.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("%d files in the plot dir, want 3 PNGs and no temporaries", len(ents))
	}
}
