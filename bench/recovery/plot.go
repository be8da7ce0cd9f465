package recovery

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Plot geometry, in SVG user units (pixels at 100 %): one panel per strategy, stacked, so that the
// failures line up and every panel shares the x and y scales.
const (
	plotWidth       = 900.0
	plotLeft        = 78.0  // room for the y tick labels and the y axis title
	plotRight       = 24.0  // room for the last x tick label
	plotHeaderH     = 100.0 // title, subtitle, legend
	plotPanelTitleH = 24.0
	plotPanelH      = 140.0
	plotPanelTicksH = 22.0 // x tick labels under each panel
	plotPanelGapH   = 14.0
	plotFooterH     = 34.0 // x axis title
	// plotBefore and plotAfter are the time shown before and after the failure; the window grows after it
	// to four times the longest outage.
	plotBeforeMS = 100.0
	plotAfterMS  = 200.0
)

// Colours of the lines and markers (colour-blind safe, after Tableau 10).
const (
	colourSources  = "#4c78a8"
	colourSinks    = "#f58518"
	colourAffected = "#54a24b"
	colourFailure  = "#d62728"
)

// plotLine is one drawn series: where it is taken from a Series and how it looks.
type plotLine struct {
	key, label, colour string
	width              float64
	dash               string
	of                 func(*Series) []int64
}

var plotLines = []plotLine{
	{"sources", "sources: records emitted", colourSources, 1.5, "", func(s *Series) []int64 { return s.SourcesRPS }},
	{"sinks", "sinks: records received", colourSinks, 2.25, "", func(s *Series) []int64 { return s.SinksRPS }},
	{"affected", fmt.Sprintf("sinks: records of the path through map[%d]", FailedSubtask), colourAffected, 1.5, "5 3",
		func(s *Series) []int64 { return s.SinksAffectedRPS }},
}

// Plot draws the records per second around the failure of each run as an SVG image: one panel per
// strategy, stacked, with the same time and rate scales; time runs from the failure (a red line), the
// engine's outage is shaded. The window shows 100 ms before the failure and 200 ms after it, or four times
// the longest outage if that is more. The output depends on rs alone.
func Plot(rs []*Result) ([]byte, error) {
	var runs []*Result
	for _, r := range rs {
		if r != nil && r.Series != nil && len(r.Series.SourcesRPS) > 0 {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return nil, errors.New("recovery plot: no run has a throughput series")
	}
	for _, r := range runs {
		s := r.Series
		if s.BucketMS <= 0 || len(s.SinksRPS) != len(s.SourcesRPS) || len(s.SinksAffectedRPS) != len(s.SourcesRPS) {
			return nil, fmt.Errorf("recovery plot: %s: malformed series (bucket %d ms, %d, %d and %d buckets)", r.Failover, s.BucketMS,
				len(s.SourcesRPS), len(s.SinksRPS), len(s.SinksAffectedRPS))
		}
	}

	// The window: the same for every panel, cut to what the series cover, on whole buckets.
	xMin, xMax := -plotBeforeMS, plotAfterMS
	for _, r := range runs {
		xMax = max(xMax, 4*float64(r.OutageMS), 4*r.SinksFailureToOutputMS)
	}
	xMax = math.Ceil(xMax/100) * 100
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		s := r.Series
		first = min(first, s.StartMS)
		last = max(last, s.StartMS+float64(len(s.SourcesRPS))*float64(s.BucketMS))
	}
	xMin, xMax = max(xMin, first), min(xMax, last)
	if xMax <= xMin {
		return nil, errors.New("recovery plot: the series do not cover the failure")
	}

	// The rate axis runs to the highest bucket, or to twice the sources' median rate if that is lower: a
	// stall of the machine and its catch-up can be many times the rate, and would flatten the dip that the
	// picture is for. Buckets above the axis are drawn at its top, marked with a triangle.
	yMax := 0.0
	var rates []float64
	for _, r := range runs {
		for _, l := range plotLines {
			forBuckets(r.Series, l.of(r.Series), xMin, xMax, func(_, _ float64, v int64) { yMax = max(yMax, float64(v)) })
		}
		forBuckets(r.Series, r.Series.SourcesRPS, xMin, xMax, func(_, _ float64, v int64) { rates = append(rates, float64(v)) })
	}
	if len(rates) > 0 {
		slices.Sort(rates)
		if m := 2 * rates[len(rates)/2]; m > 0 {
			yMax = min(yMax, m)
		}
	}
	yStep := niceStep(max(yMax, 1), 4)
	yTop := math.Ceil(max(yMax, 1)/yStep) * yStep
	xStep := niceStep(xMax-xMin, 10)

	panelBlock := plotPanelTitleH + plotPanelH + plotPanelTicksH + plotPanelGapH
	height := plotHeaderH + float64(len(runs))*panelBlock + plotFooterH
	innerW := plotWidth - plotLeft - plotRight
	sx := func(ms float64) float64 { return plotLeft + (ms-xMin)/(xMax-xMin)*innerW }

	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	title := "Records per second around one injected failure, per failover strategy"
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" role="img" aria-label="%s" font-family="Helvetica, Arial, sans-serif">`+"\n",
		num(plotWidth), num(height), num(plotWidth), num(height), esc(title))
	p("<title>%s</title>\n", esc(title))
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="%s" y="26" font-size="18" font-weight="bold" fill="#222">%s</text>`+"\n", num(plotLeft), esc(title))
	p(`<text x="%s" y="46" font-size="12.5" fill="#555">%s</text>`+"\n", num(plotLeft), esc(subtitle(runs[0])))

	// The legend: the lines, then the failure and the outage.
	lx := plotLeft
	const ly = 72.0
	p(`<g class="legend" font-size="12.5" fill="#222">` + "\n")
	for _, l := range plotLines {
		p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n", num(lx), num(ly-4), num(lx+22), num(ly-4), l.colour, num(l.width), dashAttr(l.dash))
		p(`<text x="%s" y="%s">%s</text>`+"\n", num(lx+28), num(ly), esc(l.label))
		lx += 28 + textWidth(l.label, 12.5) + 18
	}
	p("</g>\n")
	const ly2 = ly + 18
	lx = plotLeft
	p(`<g class="legend" font-size="12.5" fill="#222">` + "\n")
	p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5"/>`+"\n", num(lx+11), num(ly2-13), num(lx+11), num(ly2+3), colourFailure)
	failLabel := fmt.Sprintf("failure of map[%d] (the engine's time of it)", FailedSubtask)
	p(`<text x="%s" y="%s">%s</text>`+"\n", num(lx+28), num(ly2), esc(failLabel))
	lx += 28 + textWidth(failLabel, 12.5) + 18
	p(`<rect x="%s" y="%s" width="22" height="14" fill="%s" fill-opacity="0.22"/>`+"\n", num(lx), num(ly2-12), colourFailure)
	outLabel := "outage: until the restarted tasks emit again (engine)"
	p(`<text x="%s" y="%s">%s</text>`+"\n", num(lx+28), num(ly2), esc(outLabel))
	p("</g>\n")

	clipped := false
	for i, r := range runs {
		top := plotHeaderH + float64(i)*panelBlock
		y0 := top + plotPanelTitleH
		y1 := y0 + plotPanelH
		sy := func(v float64) float64 { return y1 - v/yTop*plotPanelH }
		p(`<g class="panel" data-failover="%s">`+"\n", esc(r.Failover))
		p(`<text x="%s" y="%s" font-size="14" fill="#222"><tspan font-weight="bold">%s</tspan>%s</text>`+"\n",
			num(plotLeft), num(y0-8), esc(r.Failover), esc(panelCaption(r)))
		p(`<rect class="frame" x="%s" y="%s" width="%s" height="%s" fill="#fafafa" stroke="#bbb" stroke-width="1"/>`+"\n",
			num(plotLeft), num(y0), num(innerW), num(plotPanelH))
		// Grid and y ticks.
		for v := 0.0; v <= yTop+yStep/2; v += yStep {
			y := sy(v)
			if v > 0 && v < yTop {
				p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e3e3e3" stroke-width="1"/>`+"\n", num(plotLeft), num(y), num(plotLeft+innerW), num(y))
			}
			p(`<text class="ytick" x="%s" y="%s" font-size="11.5" fill="#444" text-anchor="end">%s</text>`+"\n", num(plotLeft-6), num(y+4), rateLabel(v))
		}
		// X ticks.
		for v := math.Ceil(xMin/xStep) * xStep; v <= xMax+xStep/1000; v += xStep {
			x := sx(v)
			p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#bbb" stroke-width="1"/>`+"\n", num(x), num(y1), num(x), num(y1+4))
			p(`<text class="xtick" x="%s" y="%s" font-size="11.5" fill="#444" text-anchor="middle">%s</text>`+"\n", num(x), num(y1+17), msLabel(v))
		}
		// The outage, then the failure, under the lines.
		if 0 >= xMin && 0 <= xMax {
			w := max(sx(math.Min(float64(r.OutageMS), xMax))-sx(0), 2)
			p(`<rect class="outage" data-ms="%d" x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="0.22"/>`+"\n",
				r.OutageMS, num(sx(0)), num(y0), num(w), num(plotPanelH), colourFailure)
			p(`<line class="failure" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5"/>`+"\n", num(sx(0)), num(y0), num(sx(0)), num(y1), colourFailure)
		}
		for _, l := range plotLines {
			var pts, above strings.Builder
			forBuckets(r.Series, l.of(r.Series), xMin, xMax, func(from, to float64, v int64) {
				y := num(sy(min(float64(v), yTop)))
				fmt.Fprintf(&pts, "%s,%s %s,%s ", num(sx(from)), y, num(sx(to)), y)
				if float64(v) > yTop {
					clipped = true
					x := (sx(from) + sx(to)) / 2
					fmt.Fprintf(&above, `<polygon class="above" data-series="%s" data-value="%d" points="%s,%s %s,%s %s,%s" fill="%s"/>`+"\n",
						l.key, v, num(x-4), num(y0+7), num(x+4), num(y0+7), num(x), num(y0+1), l.colour)
				}
			})
			p(`<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round"%s/>`+"\n",
				l.key, strings.TrimSpace(pts.String()), l.colour, num(l.width), dashAttr(l.dash))
			b.WriteString(above.String())
		}
		p("</g>\n")
	}
	// Axis titles.
	yMid := plotHeaderH + float64(len(runs))*panelBlock/2
	p(`<text x="18" y="%s" font-size="12.5" fill="#222" text-anchor="middle" transform="rotate(-90 18 %s)">records per second</text>`+"\n", num(yMid), num(yMid))
	note := ""
	if clipped {
		note = "; \u25b2 a bucket above the scale"
	}
	p(`<text x="%s" y="%s" font-size="12.5" fill="#222" text-anchor="middle">time since the failure (ms); %d ms buckets%s</text>`+"\n",
		num(plotLeft+innerW/2), num(height-12), runs[0].Series.BucketMS, esc(note))
	p("</svg>\n")
	return b.Bytes(), nil
}

// forBuckets calls f with each bucket of vs that lies within [xMin, xMax] (ms since the failure): its
// start, its end and its value.
func forBuckets(s *Series, vs []int64, xMin, xMax float64, f func(from, to float64, v int64)) {
	w := float64(s.BucketMS)
	for i, v := range vs {
		from := s.StartMS + float64(i)*w
		if from >= xMin-1e-9 && from+w <= xMax+1e-9 {
			f(from, from+w, v)
		}
	}
}

func subtitle(r *Result) string {
	return fmt.Sprintf("parallelism %d · %s records/s from the sources · checkpoints every %d ms · buffer timeout %d ms · scenario %s",
		r.Parallelism, thousands(r.SourceRateRPS), r.CheckpointIntervalMS, r.BufferTimeoutMS, r.Scenario)
}

// panelCaption follows the strategy's name above its panel: the engine's figures of the failover.
func panelCaption(r *Result) string {
	var loss string
	switch {
	case r.RecordsLost > 0:
		loss = thousands(int64(r.RecordsLost)) + " records lost (reported)"
	case r.RecordsReplayed > 0 || r.DuplicatesDropped > 0:
		loss = fmt.Sprintf("nothing lost, %s replayed, %s duplicates dropped", thousands(int64(r.RecordsReplayed)), thousands(int64(r.DuplicatesDropped)))
	default:
		loss = "nothing lost"
	}
	return fmt.Sprintf("  outage %d ms · %d of %d subtasks restarted · %s", r.OutageMS, r.RestartedSubtasks, r.Subtasks, loss)
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts span into at most n parts.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			return m * pow
		}
	}
	return 10 * pow
}

// rateLabel writes a tick's records per second: 0, 50k, 1.5M.
func rateLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// msLabel writes a tick's time relative to the failure, with a true minus sign.
func msLabel(v float64) string {
	v = math.Round(v*1000) / 1000
	switch {
	case v < 0:
		return "\u2212" + strconv.FormatFloat(-v, 'f', -1, 64)
	case v > 0:
		return "+" + strconv.FormatFloat(v, 'f', -1, 64)
	}
	return "0"
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// textWidth estimates the width of a line of text in a sans-serif font, to lay out the legend.
func textWidth(s string, size float64) float64 {
	return float64(len([]rune(s))) * size * 0.52
}

func dashAttr(d string) string {
	if d == "" {
		return ""
	}
	return fmt.Sprintf(` stroke-dasharray="%s"`, d)
}

// num writes a coordinate with at most two decimals and no trailing zeros, so that equal data give equal
// bytes.
func num(v float64) string {
	v = math.Round(v*100) / 100
	if v == 0 {
		return "0" // not "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
