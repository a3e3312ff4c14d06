package templates

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotStep is the resolution of the dashboard plots: Prometheus's scrape
// interval in prometheus.yml.
const plotStep = 5 * time.Second

// palette colours the series of a plot in turn (Grafana's classic
// palette).
var palette = []color.RGBA{
	{0x73, 0xbf, 0x69, 0xff}, {0xf2, 0xcc, 0x0c, 0xff}, {0x8a, 0xb8, 0xff, 0xff}, {0xff, 0x78, 0x0a, 0xff},
	{0xf2, 0x49, 0x5c, 0xff}, {0x57, 0x94, 0xf2, 0xff}, {0xb8, 0x77, 0xd9, 0xff}, {0x70, 0x5d, 0xa0, 0xff},
}

// legendLabel matches a {{label}} of a Grafana legend format.
var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// plotDashboard draws each Prometheus panel of the dashboard, its queries
// run over [start, end] every plotStep, into DIR/panel-ID.png (8 x 3.5
// inches at 96 dpi), the series named as the panel's legend format names
// them. A heatmap's buckets are drawn as one line each.
func plotDashboard(t *testing.T, prom *promAPI, queries []panelQuery, start, end time.Time, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	byPanel := map[int][]panelQuery{}
	var order []int
	for _, q := range queries {
		if _, ok := byPanel[q.Panel.ID]; !ok {
			order = append(order, q.Panel.ID)
		}
		byPanel[q.Panel.ID] = append(byPanel[q.Panel.ID], q)
	}
	for _, id := range order {
		qs := byPanel[id]
		p := plot.New()
		p.Title.Text = qs[0].Panel.Title
		p.X.Label.Text = "seconds since the start of the run"
		p.Y.Label.Text = unitLabel(qs[0].Panel.FieldCfg.Defaults.Unit)
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		lines := 0
		for _, q := range qs {
			series, err := prom.queryRange(q.Expr, start, end, plotStep)
			if err != nil {
				t.Fatalf("panel %q query %s: %v", q.Panel.Title, q.RefID, err)
			}
			for _, s := range series {
				xy := points(s, start)
				if len(xy) == 0 {
					continue
				}
				l, err := plotter.NewLine(xy)
				if err != nil {
					t.Fatal(err)
				}
				l.Color = palette[lines%len(palette)]
				l.Width = vg.Points(1.5)
				p.Add(l)
				p.Legend.Add(legend(q.LegendFormat, s.Metric), l)
				lines++
			}
		}
		if lines == 0 {
			t.Fatalf("panel %q: no samples between %v and %v", qs[0].Panel.Title, start, end)
		}
		if lines > 8 { // a heatmap's buckets: the legend would hide the plot
			p.Legend = plot.NewLegend()
		}
		file := filepath.Join(dir, fmt.Sprintf("panel-%d.png", id))
		if err := p.Save(8*vg.Inch, 3.5*vg.Inch, file); err != nil {
			t.Fatal(err)
		}
		t.Logf("panel %q: %d series plotted into %s", qs[0].Panel.Title, lines, file)
	}
}

// points returns the samples of a range query's series that are numbers,
// x in seconds since start.
func points(s promSeries, start time.Time) plotter.XYs {
	var xy plotter.XYs
	for _, v := range s.Values {
		if len(v) != 2 {
			continue
		}
		ts, ok := v[0].(float64)
		str, ok2 := v[1].(string)
		if !ok || !ok2 {
			continue
		}
		y, err := strconv.ParseFloat(str, 64)
		if err != nil || math.IsNaN(y) || math.IsInf(y, 0) {
			continue
		}
		xy = append(xy, plotter.XY{X: ts - float64(start.Unix()), Y: y})
	}
	return xy
}

// legend fills a Grafana legend format with a series' labels.
func legend(format string, labels map[string]string) string {
	if format == "" {
		return fmt.Sprint(labels)
	}
	return strings.TrimSpace(legendLabel.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendLabel.FindStringSubmatch(m)[1]]
	}))
}

// unitLabel names a Grafana unit for the y axis.
func unitLabel(unit string) string {
	switch unit {
	case "rps":
		return "records/s"
	case "Bps":
		return "bytes/s"
	case "s":
		return "seconds"
	case "bytes":
		return "bytes"
	case "percentunit":
		return "fraction"
	case "ops":
		return "per second"
	default:
		return ""
	}
}
