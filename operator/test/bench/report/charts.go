package main

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

const (
	// intervalSeconds is sysbench's --report-interval in the OLTP benchmark.
	intervalSeconds = 10
	chartWidth      = 16 * vg.Centimeter
	chartHeight     = 8 * vg.Centimeter
	medianChart     = "tps-median.png"
)

// chartFiles are the charts written, as links relative to benchmarks.md.
type chartFiles struct {
	median string
	// perConfig maps a configuration's name to its TPS-over-time chart.
	perConfig map[string]string
}

// unsafeInFileName is what a configuration's name may not bring into a file name.
var unsafeInFileName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// removeCharts deletes the TPS charts in dir: charts of configurations an earlier results
// folder had would otherwise stay behind, unlinked, in the docs.
func removeCharts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("charts folder: %w", err)
	}
	stale, err := filepath.Glob(filepath.Join(dir, "*tps-*.png"))
	if err != nil {
		return fmt.Errorf("charts folder: %w", err)
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("remove an old chart: %w", err)
		}
	}
	return nil
}

// writeCharts draws the median TPS chart and one TPS-over-time chart per configuration with
// interval TPS into dir, their names starting with prefix (one per data set).
func writeCharts(dir, prefix string, summaries []oltpSummary) (chartFiles, error) {
	files := chartFiles{perConfig: map[string]string{}}
	if len(summaries) == 0 {
		return files, nil
	}
	if err := medianTPSChart(summaries, filepath.Join(dir, prefix+medianChart)); err != nil {
		return files, err
	}
	files.median = path.Join(chartsDir, prefix+medianChart)

	// The same axes for every configuration, so the charts compare at a glance; headroom above
	// for the legend.
	var axes chartAxes
	for _, s := range summaries {
		for _, r := range s.runs {
			axes.xMax = math.Max(axes.xMax, float64(len(r.IntervalTPS)*intervalSeconds))
			for _, tps := range r.IntervalTPS {
				axes.yMax = math.Max(axes.yMax, tps)
			}
		}
	}
	axes.yMax *= 1.15
	for _, s := range summaries {
		if !hasIntervals(s) {
			continue
		}
		name := prefix + "tps-" + unsafeInFileName.ReplaceAllString(s.config.Name, "_") + ".png"
		if err := tpsOverTimeChart(s, axes, filepath.Join(dir, name)); err != nil {
			return files, err
		}
		files.perConfig[s.config.Name] = path.Join(chartsDir, name)
	}
	return files, nil
}

func hasIntervals(s oltpSummary) bool {
	for _, r := range s.runs {
		if len(r.IntervalTPS) > 0 {
			return true
		}
	}
	return false
}

// chartAxes are the upper ends of the TPS-over-time charts' axes; both start at zero.
type chartAxes struct{ xMax, yMax float64 }

func tpsOverTimeChart(s oltpSummary, axes chartAxes, file string) error {
	p := plot.New()
	p.Title.Text = "TPS over time: " + s.config.Name
	p.X.Label.Text = "seconds into the measured run"
	p.Y.Label.Text = "TPS (10-s intervals)"
	p.X.Min, p.X.Max = 0, axes.xMax
	p.Y.Min, p.Y.Max = 0, axes.yMax
	p.Legend.Top = true
	for i, r := range s.runs {
		if len(r.IntervalTPS) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(r.IntervalTPS))
		for j, tps := range r.IntervalTPS {
			// sysbench reports each interval at its end.
			xys[j] = plotter.XY{X: float64((j + 1) * intervalSeconds), Y: tps}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("chart %s, run %d: %w", s.config.Name, r.Rep, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("run %d", r.Rep), line)
	}
	p.Add(plotter.NewGrid())
	if err := p.Save(chartWidth, chartHeight, file); err != nil {
		return fmt.Errorf("chart %s: %w", s.config.Name, err)
	}
	return nil
}

// medianTPSChart is a bar per configuration with whiskers from its slowest to its fastest run; a
// configuration without runs gets no bar.
func medianTPSChart(summaries []oltpSummary, file string) error {
	p := plot.New()
	p.Title.Text = "Median TPS per configuration (whiskers: min–max)"
	p.Y.Label.Text = "TPS"
	p.Y.Min = 0
	medians := make(plotter.Values, len(summaries))
	var whiskers struct {
		plotter.XYs
		plotter.YErrors
	}
	var names []string
	for i, s := range summaries {
		names = append(names, s.config.Name)
		if math.IsNaN(s.tps) {
			continue
		}
		medians[i] = s.tps
		whiskers.XYs = append(whiskers.XYs, plotter.XY{X: float64(i), Y: s.tps})
		whiskers.YErrors = append(whiskers.YErrors, struct{ Low, High float64 }{s.tps - s.tpsMin, s.tpsMax - s.tps})
	}
	// Half of the width for the bars, whatever the number of configurations.
	bars, err := plotter.NewBarChart(medians, chartWidth/vg.Length(2*len(summaries)))
	if err != nil {
		return fmt.Errorf("median TPS chart: %w", err)
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(plotter.NewGrid(), bars)
	if len(whiskers.XYs) > 0 {
		errBars, err := plotter.NewYErrorBars(whiskers)
		if err != nil {
			return fmt.Errorf("median TPS chart, whiskers: %w", err)
		}
		p.Add(errBars)
	}
	p.NominalX(names...)
	// Half a bar's slot of room beside the first and the last bar.
	p.X.Min, p.X.Max = -0.5, float64(len(summaries))-0.5
	// Configuration names are long; slanted they do not overlap.
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = -0.9
	p.X.Tick.Label.YAlign = -0.6
	if err := p.Save(chartWidth, chartHeight, file); err != nil {
		return fmt.Errorf("median TPS chart: %w", err)
	}
	return nil
}
