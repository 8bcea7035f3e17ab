package main

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// drawCurve renders c into dir/plotFile(c) with gonum/plot: one line per
// side, N on a log axis (the N run from 10 to thousands), the
// median at each N and an error bar for the spread when runs repeated.
// The file is written to a temporary name and renamed, like the document.
func drawCurve(dir string, c Curve) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (%s)", c.Bench, c.Unit)
	p.X.Label.Text = "N (live processes)"
	p.Y.Label.Text = c.Unit
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	var lines []any
	for _, s := range c.Sides {
		xys := make(plotter.XYs, len(s.Points))
		errs := make(plotter.YErrors, len(s.Points))
		spread := false
		for i, pt := range s.Points {
			xys[i] = plotter.XY{X: float64(pt.N), Y: pt.Median}
			errs[i] = struct{ Low, High float64 }{pt.Median - pt.Min, pt.Max - pt.Median}
			spread = spread || pt.Runs > 1
		}
		lines = append(lines, s.Name, xys)
		if spread {
			bars, err := plotter.NewYErrorBars(struct {
				plotter.XYer
				plotter.YErrorer
			}{xys, errs})
			if err != nil {
				return err
			}
			p.Add(bars)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return err
	}
	path := filepath.Join(dir, plotFile(c))
	tmp := path + ".tmp.png"
	if err := p.Save(6*vg.Inch, 3.5*vg.Inch, tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
