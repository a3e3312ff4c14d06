package main

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeBenchPlot draws two panels into a PNG at path: throughput per
// second over the run, and the latency distributions by percentile on the
// "nines" scale HdrHistogram plots use (x = -log10(1 - q)).
func writeBenchPlot(path string, r *BenchResult) error {
	tp, err := throughputPlot(r)
	if err != nil {
		return err
	}
	lp, err := latencyPlot(r)
	if err != nil {
		return err
	}
	img := vgimg.New(vg.Points(720), vg.Points(820))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Points(10), PadY: vg.Points(16), PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(16)}
	canvases := plot.Align([][]*plot.Plot{{tp}, {lp}}, tiles, dc)
	tp.Draw(canvases[0][0])
	lp.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write --plot file: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write --plot file: %w", err)
	}
	return f.Close()
}

var (
	colorPublish = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	colorConsume = color.RGBA{R: 214, G: 39, B: 40, A: 255}
)

func throughputPlot(r *BenchResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("sq bench %s: throughput (%d B records, sync %s, %d partition%s)", r.Mode, r.RecordSizeBytes, r.SyncPolicy, r.Partitions, plural(r.Partitions))
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "records/s"
	p.Add(plotter.NewGrid())
	prod, cons := throughputPoints(r.Throughput)
	if len(prod) == 0 {
		prod = append(prod, plotter.XY{X: r.PublishSeconds, Y: r.PublishRecordsPerSec})
		cons = append(cons, plotter.XY{X: r.ConsumeSeconds, Y: r.ConsumeRecordsPerSec})
	}
	if err := addLine(p, "published (acked)", prod, colorPublish); err != nil {
		return nil, err
	}
	if r.Mode != "produce" {
		if err := addLine(p, "consumed", cons, colorConsume); err != nil {
			return nil, err
		}
	}
	p.Y.Min = 0
	p.Legend.Top = true
	return p, nil
}

// throughputPoints converts the samples into records/s per interval, each
// scaled by its real length. The final sample, taken when the run stops,
// covers the tail (producers closing, consumers draining) of a partial
// interval and is left out unless it is the only one: it would draw a rate
// drop that did not happen.
func throughputPoints(samples []BenchSample) (prod, cons plotter.XYs) {
	prod = make(plotter.XYs, 0, len(samples))
	cons = make(plotter.XYs, 0, len(samples))
	last := 0.0
	for i, s := range samples {
		dt := s.Second - last
		last = s.Second
		if dt <= 0 || i == len(samples)-1 && i > 0 {
			continue
		}
		prod = append(prod, plotter.XY{X: s.Second, Y: float64(s.Produced) / dt})
		cons = append(cons, plotter.XY{X: s.Second, Y: float64(s.Consumed) / dt})
	}
	return prod, cons
}

func latencyPlot(r *BenchResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "latency by percentile"
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "ms"
	p.Add(plotter.NewGrid())
	maxNines := 1.0
	for _, c := range []struct {
		name string
		h    *hdrhistogram.Histogram
		col  color.Color
	}{{"ack latency", r.ackHist, colorPublish}, {"end-to-end latency", r.e2eHist, colorConsume}} {
		if c.h == nil || c.h.TotalCount() == 0 {
			continue
		}
		xys, nines := percentileCurve(c.h)
		maxNines = max(maxNines, nines)
		if err := addLine(p, c.name, xys, c.col); err != nil {
			return nil, err
		}
	}
	var ticks []plot.Tick
	for n := 0; float64(n) <= math.Ceil(maxNines); n++ {
		q := 100 * (1 - math.Pow(10, -float64(n)))
		ticks = append(ticks, plot.Tick{Value: float64(n), Label: fmt.Sprintf("%g%%", math.Round(q*1000)/1000)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min = 0
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}

// percentileCurve samples h at quantiles evenly spaced on the nines scale
// up to what its count supports, in milliseconds.
func percentileCurve(h *hdrhistogram.Histogram) (plotter.XYs, float64) {
	limit := math.Max(1, math.Log10(float64(h.TotalCount())))
	var xys plotter.XYs
	for x := 0.0; x <= limit+1e-9; x += 0.02 {
		q := 100 * (1 - math.Pow(10, -x))
		xys = append(xys, plotter.XY{X: x, Y: float64(h.ValueAtQuantile(q)) / 1000})
	}
	return xys, limit
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, col color.Color) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = col
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}
