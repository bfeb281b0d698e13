package bench

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// Small SVG charts, enough for the doc: grouped bars (linear or log scale)
// with reference lines, and lines over time. Plain SVG 1.1 with no script or
// external font, so GitHub and any browser render it as an image.

var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948"}

const (
	chartW, chartH                = 760, 400
	marginL, marginR, marginT, mB = 80, 30, 50, 90
)

// barChart is bars grouped along x: Values[series][group].
type barChart struct {
	Title  string
	YLabel string
	Groups []string
	Series []string
	Values [][]float64 // NaN: no bar
	Refs   []refLine
	Log    bool // log10 y axis (all values > 0)
	Format func(float64) string
}

// refLine is a horizontal reference: across one group, or all (Group -1).
// Lines with the same Label share one legend entry, so a per-group
// reference (the ceiling at each batch size) is explained once.
type refLine struct {
	Label string
	Value float64
	Group int
	Color string
	Dash  string // stroke-dasharray
}

func (c barChart) svg() string {
	var b strings.Builder
	header(&b, c.Title)
	hi := 0.0
	lo := math.Inf(1)
	for _, s := range c.Values {
		for _, v := range s {
			if !math.IsNaN(v) {
				hi, lo = math.Max(hi, v), math.Min(lo, v)
			}
		}
	}
	for _, r := range c.Refs {
		hi, lo = math.Max(hi, r.Value), math.Min(lo, r.Value)
	}
	y := newScale(lo, hi, c.Log)
	axes(&b, y, c.YLabel, c.Format)

	plotW := float64(chartW - marginL - marginR)
	groupW := plotW / float64(max(len(c.Groups), 1))
	barW := groupW * 0.8 / float64(max(len(c.Series), 1))
	for g, name := range c.Groups {
		x0 := float64(marginL) + float64(g)*groupW
		for i, line := range strings.Split(name, "\n") {
			text(&b, x0+groupW/2, chartH-mB+18+float64(i)*14, "middle", 12, "#333", line)
		}
		for s := range c.Series {
			v := c.Values[s][g]
			if math.IsNaN(v) {
				continue
			}
			x := x0 + groupW*0.1 + float64(s)*barW
			top := y.px(v)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
				x, top, barW*0.92, float64(chartH-mB)-top, palette[s%len(palette)], html.EscapeString(c.Series[s]), html.EscapeString(name), html.EscapeString(c.Format(v)))
		}
	}
	var keys []legendKey
	for _, s := range c.Series {
		keys = append(keys, legendKey{name: s})
	}
	for _, r := range c.Refs {
		x1, x2 := float64(marginL), float64(chartW-marginR)
		if r.Group >= 0 {
			x1 = float64(marginL) + float64(r.Group)*groupW + groupW*0.04
			x2 = x1 + groupW*0.92
		}
		yy := y.px(r.Value)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="%s"><title>%s: %s</title></line>`+"\n",
			x1, yy, x2, yy, r.Color, r.Dash, html.EscapeString(r.Label), html.EscapeString(c.Format(r.Value)))
		if !slices.ContainsFunc(keys, func(k legendKey) bool { return k.name == r.Label }) {
			keys = append(keys, legendKey{name: r.Label, color: r.Color, dash: r.Dash})
		}
	}
	legend(&b, keys)
	b.WriteString("</svg>\n")
	return b.String()
}

// lineChart is series of (x, y) points, x in seconds.
type lineChart struct {
	Title  string
	XLabel string
	YLabel string
	Series []lineSeries
	Format func(float64) string
}

type lineSeries struct {
	Name string
	X, Y []float64
	Dash bool
}

func (c lineChart) svg() string {
	var b strings.Builder
	header(&b, c.Title)
	hi, xmax := 0.0, 0.0
	for _, s := range c.Series {
		for i := range s.Y {
			hi, xmax = math.Max(hi, s.Y[i]), math.Max(xmax, s.X[i])
		}
	}
	y := newScale(0, hi, false)
	axes(&b, y, c.YLabel, c.Format)
	x := newScale(0, xmax, false)
	plotW := float64(chartW - marginL - marginR)
	xpx := func(v float64) float64 { return float64(marginL) + (v-x.lo)/(x.hi-x.lo)*plotW }
	for _, t := range x.ticks {
		text(&b, xpx(t), chartH-mB+18, "middle", 11, "#333", trimFloat(t))
	}
	text(&b, float64(marginL)+plotW/2, chartH-mB+36, "middle", 12, "#333", c.XLabel)
	var keys []legendKey
	for i, s := range c.Series {
		pts := make([]string, len(s.X))
		for j := range s.X {
			pts[j] = fmt.Sprintf("%.1f,%.1f", xpx(s.X[j]), y.px(s.Y[j]))
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", palette[i%len(palette)], dash, strings.Join(pts, " "))
		k := legendKey{name: s.Name, color: palette[i%len(palette)]}
		if s.Dash {
			k.dash = "6 4"
		}
		keys = append(keys, k)
	}
	legend(&b, keys)
	b.WriteString("</svg>\n")
	return b.String()
}

// scale maps values to the plot's pixel rows.
type scale struct {
	lo, hi float64
	log    bool
	ticks  []float64
}

func newScale(lo, hi float64, log bool) scale {
	if log {
		lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 1e-9))))
		hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))
		s := scale{lo: lo, hi: hi, log: true}
		for t := lo; t <= hi*1.0001; t *= 10 {
			s.ticks = append(s.ticks, t)
		}
		return s
	}
	if hi <= 0 {
		hi = 1
	}
	step := niceStep(hi / 5)
	hi = math.Ceil(hi/step) * step
	s := scale{lo: 0, hi: hi}
	for t := 0.0; t <= hi+step/2; t += step {
		s.ticks = append(s.ticks, t)
	}
	return s
}

func (s scale) px(v float64) float64 {
	plotH := float64(chartH - marginT - mB)
	f := (v - s.lo) / (s.hi - s.lo)
	if s.log {
		f = (math.Log10(math.Max(v, s.lo)) - math.Log10(s.lo)) / (math.Log10(s.hi) - math.Log10(s.lo))
	}
	return float64(chartH-mB) - f*plotH
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func header(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", chartW, chartH)
	text(b, chartW/2, 26, "middle", 15, "#111", title)
}

func axes(b *strings.Builder, y scale, label string, format func(float64) string) {
	for _, t := range y.ticks {
		py := y.px(t)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", marginL, py, chartW-marginR, py)
		text(b, marginL-6, py+4, "end", 11, "#333", format(t))
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", marginL, chartH-mB, chartW-marginR, chartH-mB)
	fmt.Fprintf(b, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle" font-size="12" fill="#333">%s</text>`+"\n",
		(marginT+chartH-mB)/2, (marginT+chartH-mB)/2, html.EscapeString(label))
}

// legendKey is one legend entry: a filled square, or a line when dash is
// set (or the color is given for a line chart's series).
type legendKey struct {
	name  string
	color string // default: the palette color of the entry's index
	dash  string
}

func legend(b *strings.Builder, keys []legendKey) {
	x, yy := float64(marginL), float64(chartH-mB+52)
	for i, k := range keys {
		w := 32 + float64(len(k.name))*6.2
		if x+w > chartW-marginR && x > marginL {
			x, yy = float64(marginL), yy+18
		}
		if k.color == "" {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", x, yy-10, palette[i%len(palette)])
		} else {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n", x, yy-4, x+16, yy-4, k.color, k.dash)
		}
		text(b, x+20, yy, "start", 12, "#333", k.name)
		x += w
	}
}

func text(b *strings.Builder, x, y float64, anchor string, size int, color, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%d" fill="%s">%s</text>`+"\n", x, y, anchor, size, color, html.EscapeString(s))
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
