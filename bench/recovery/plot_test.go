package recovery

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// svgDoc is the part of Plot's SVG that the tests read.
type svgDoc struct {
	XMLName xml.Name   `xml:"svg"`
	Width   float64    `xml:"width,attr"`
	Title   string     `xml:"title"`
	Panels  []svgPanel `xml:"g"`
}

type svgPanel struct {
	Class    string        `xml:"class,attr"`
	Failover string        `xml:"data-failover,attr"`
	Texts    []svgText     `xml:"text"`
	Rects    []svgRect     `xml:"rect"`
	Lines    []svgLine     `xml:"line"`
	Series   []svgPolyline `xml:"polyline"`
	Above    []svgPolygon  `xml:"polygon"`
}

type svgPolygon struct {
	Class  string `xml:"class,attr"`
	Series string `xml:"data-series,attr"`
	Value  int64  `xml:"data-value,attr"`
}

type svgText struct {
	Class string `xml:"class,attr"`
	Text  string `xml:",chardata"`
	Inner string `xml:",innerxml"`
}

type svgRect struct {
	Class  string  `xml:"class,attr"`
	MS     int64   `xml:"data-ms,attr"`
	X      float64 `xml:"x,attr"`
	Y      float64 `xml:"y,attr"`
	Width  float64 `xml:"width,attr"`
	Height float64 `xml:"height,attr"`
}

type svgLine struct {
	Class string  `xml:"class,attr"`
	X1    float64 `xml:"x1,attr"`
	X2    float64 `xml:"x2,attr"`
}

type svgPolyline struct {
	Series string `xml:"data-series,attr"`
	Points string `xml:"points,attr"`
}

// fixedRun is a run of strategy whose series is 10 ms buckets from 200 ms before the failure to 400 ms
// after it: the sources at 200,000 records/s, the sinks too except for a dip to 0 in the bucket of the
// failure and a catch-up to 250,000 in the next, a quarter of that on the affected path.
func fixedRun(strategy string, outageMS int64) *Result {
	const n = 60
	s := &Series{BucketMS: 10, StartMS: -200, SourcesRPS: make([]int64, n), SinksRPS: make([]int64, n), SinksAffectedRPS: make([]int64, n)}
	for i := range n {
		s.SourcesRPS[i], s.SinksRPS[i] = 200_000, 200_000
		switch i {
		case 20:
			s.SinksRPS[i] = 0
		case 21:
			s.SinksRPS[i] = 250_000
		}
		s.SinksAffectedRPS[i] = s.SinksRPS[i] / 4
	}
	return &Result{Failover: strategy, Scenario: ScenarioBeforeShuffle, Parallelism: 4, SourceRateRPS: 200_000,
		CheckpointIntervalMS: 200, BufferTimeoutMS: 1, FailAfterMS: 2000, OutageMS: outageMS, RestartedSubtasks: 16,
		Subtasks: 16, RecordsLost: 1234, Series: s}
}

func parsePlot(t *testing.T, b []byte) svgDoc {
	t.Helper()
	// Well-formed XML from the first token to the last.
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b)
		}
	}
	var doc svgDoc
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func panels(doc svgDoc) []svgPanel {
	var ps []svgPanel
	for _, g := range doc.Panels {
		if g.Class == "panel" {
			ps = append(ps, g)
		}
	}
	return ps
}

func parsePoints(t *testing.T, s string) [][2]float64 {
	t.Helper()
	var pts [][2]float64
	for _, f := range strings.Fields(s) {
		x, y, ok := strings.Cut(f, ",")
		if !ok {
			t.Fatalf("point %q", f)
		}
		px, err1 := strconv.ParseFloat(x, 64)
		py, err2 := strconv.ParseFloat(y, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("point %q", f)
		}
		pts = append(pts, [2]float64{px, py})
	}
	return pts
}

// TestPlot draws two fixed runs and reads the picture back: a panel per strategy in order, each with its
// frame, failure line, outage band and three lines whose points are the series in the window (100 ms
// before the failure to 200 ms after it), scaled to the frame on a shared rate axis of 0 to 300,000.
func TestPlot(t *testing.T) {
	rs := []*Result{fixedRun("full", 9), fixedRun("task", 1)}
	b, err := Plot(rs)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Plot([]*Result{fixedRun("full", 9), fixedRun("task", 1)})
	if !bytes.Equal(b, again) {
		t.Error("two plots of the same data differ")
	}
	doc := parsePlot(t, b)
	if doc.Width != plotWidth || !strings.Contains(doc.Title, "Records per second") {
		t.Errorf("width %v, title %q", doc.Width, doc.Title)
	}
	ps := panels(doc)
	if len(ps) != 2 || ps[0].Failover != "full" || ps[1].Failover != "task" {
		t.Fatalf("panels %+v", ps)
	}
	const xMin, xMax, yTop = -100.0, 200.0, 300_000.0
	var ticks []string
	for i, p := range ps {
		r := rs[i]
		var frame, outage *svgRect
		for j := range p.Rects {
			switch p.Rects[j].Class {
			case "frame":
				frame = &p.Rects[j]
			case "outage":
				outage = &p.Rects[j]
			}
		}
		if frame == nil || outage == nil {
			t.Fatalf("%s: frame %v, outage %v", p.Failover, frame, outage)
		}
		sx := func(ms float64) float64 { return frame.X + (ms-xMin)/(xMax-xMin)*frame.Width }
		sy := func(v float64) float64 { return frame.Y + frame.Height - v/yTop*frame.Height }
		near := func(a, b float64) bool { return math.Abs(a-b) <= 0.011 }

		var failure *svgLine
		for j := range p.Lines {
			if p.Lines[j].Class == "failure" {
				failure = &p.Lines[j]
			}
		}
		if failure == nil || !near(failure.X1, sx(0)) || failure.X1 != failure.X2 {
			t.Errorf("%s: failure line %+v, want at x %.2f", p.Failover, failure, sx(0))
		}
		wantW := max(sx(float64(r.OutageMS))-sx(0), 2)
		if outage.MS != r.OutageMS || !near(outage.X, sx(0)) || !near(outage.Width, wantW) || outage.Height != frame.Height {
			t.Errorf("%s: outage band %+v, want from x %.2f, %.2f wide", p.Failover, outage, sx(0), wantW)
		}

		if len(p.Series) != len(plotLines) {
			t.Fatalf("%s: %d lines, want %d", p.Failover, len(p.Series), len(plotLines))
		}
		for j, l := range plotLines {
			pl := p.Series[j]
			if pl.Series != l.key {
				t.Errorf("%s: line %d is %q, want %q", p.Failover, j, pl.Series, l.key)
			}
			pts := parsePoints(t, pl.Points)
			vs := l.of(r.Series)[10:40] // the buckets from -100 ms to +200 ms
			if len(pts) != 2*len(vs) {
				t.Fatalf("%s %s: %d points, want %d", p.Failover, l.key, len(pts), 2*len(vs))
			}
			for k, v := range vs {
				from := xMin + float64(k)*10
				a, b := pts[2*k], pts[2*k+1]
				if !near(a[0], sx(from)) || !near(b[0], sx(from+10)) || !near(a[1], sy(float64(v))) || !near(b[1], sy(float64(v))) {
					t.Errorf("%s %s: bucket at %v ms drawn %v-%v, want x %.2f-%.2f, y %.2f", p.Failover, l.key, from, a, b, sx(from), sx(from+10), sy(float64(v)))
				}
			}
		}

		var yt []string
		for _, tx := range p.Texts {
			if tx.Class == "ytick" {
				yt = append(yt, tx.Text)
			}
		}
		if got := strings.Join(yt, " "); got != "0 100k 200k 300k" {
			t.Errorf("%s: y ticks %q", p.Failover, got)
		}
		if ticks == nil {
			for _, tx := range p.Texts {
				if tx.Class == "xtick" {
					ticks = append(ticks, tx.Text)
				}
			}
		}
		if !strings.Contains(p.Texts[0].Inner, r.Failover) || !strings.Contains(p.Texts[0].Inner, "outage "+strconv.FormatInt(r.OutageMS, 10)+" ms") ||
			!strings.Contains(p.Texts[0].Inner, "1,234 records lost") {
			t.Errorf("%s: caption %q", p.Failover, p.Texts[0].Inner)
		}
	}
	if got := strings.Join(ticks, " "); got != "\u2212100 \u221250 0 +50 +100 +150 +200" {
		t.Errorf("x ticks %q", got)
	}
}

// TestPlotWindowFollowsOutage widens the window after the failure to four times a long outage, within
// what the series cover.
func TestPlotWindowFollowsOutage(t *testing.T) {
	b, err := Plot([]*Result{fixedRun("full", 70), fixedRun("approximate", 3)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range panels(parsePlot(t, b)) {
		pts := parsePoints(t, p.Series[0].Points)
		// 70 ms · 4 = 280 ms, rounded up to 300 ms: the buckets from -100 ms to +300 ms.
		if len(pts) != 2*40 {
			t.Errorf("%s: %d points, want 80", p.Failover, len(pts))
		}
	}
	b, err = Plot([]*Result{fixedRun("full", 700)})
	if err != nil {
		t.Fatal(err)
	}
	if pts := parsePoints(t, panels(parsePlot(t, b))[0].Series[0].Points); len(pts) != 2*50 {
		t.Errorf("window past the series: %d points, want 100 (to the series' end at +400 ms)", len(pts))
	}
}

// TestPlotAbove draws a run with a bucket far above the rate: the axis stops at twice the sources' median
// rate, and the bucket is drawn at its top and marked.
func TestPlotAbove(t *testing.T) {
	r := fixedRun("full", 5)
	r.Series.SinksRPS[25] = 900_000
	b, err := Plot([]*Result{r})
	if err != nil {
		t.Fatal(err)
	}
	p := panels(parsePlot(t, b))[0]
	var yt []string
	for _, tx := range p.Texts {
		if tx.Class == "ytick" {
			yt = append(yt, tx.Text)
		}
	}
	if got := strings.Join(yt, " "); got != "0 100k 200k 300k 400k" {
		t.Errorf("y ticks %q, want to 400k", got)
	}
	if len(p.Above) != 1 || p.Above[0].Series != "sinks" || p.Above[0].Value != 900_000 {
		t.Errorf("marks above the scale %+v", p.Above)
	}
	var top float64
	for _, rc := range p.Rects {
		if rc.Class == "frame" {
			top = rc.Y
		}
	}
	pts := parsePoints(t, p.Series[1].Points)
	if at := pts[2*15]; at[1] != top { // bucket 25 is the 15th from -100 ms
		t.Errorf("the bucket above the scale is drawn at y %v, want the top %v", at[1], top)
	}
	if !bytes.Contains(b, []byte("a bucket above the scale")) {
		t.Error("no note of the buckets above the scale")
	}
	if b, _ := Plot([]*Result{fixedRun("full", 5)}); bytes.Contains(b, []byte("above the scale")) {
		t.Error("a note of buckets above the scale where there is none")
	}
}

func TestPlotErrors(t *testing.T) {
	bad := fixedRun("full", 5)
	bad.Series.SinksRPS = bad.Series.SinksRPS[:3]
	late := fixedRun("full", 5)
	late.Series.StartMS = 1000
	for name, rs := range map[string][]*Result{
		"none":       nil,
		"no series":  {{Failover: "full"}},
		"malformed":  {bad},
		"no failure": {late},
	} {
		if _, err := Plot(rs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Text is escaped.
	odd := fixedRun(`a<b&"c"`, 5)
	b, err := Plot([]*Result{odd})
	if err != nil {
		t.Fatal(err)
	}
	if ps := panels(parsePlot(t, b)); len(ps) != 1 || ps[0].Failover != `a<b&"c"` {
		t.Errorf("escaped failover read back as %+v", ps)
	}
}

// TestSeries buckets a fixed timeline: the sources at 100 records per ms, the sinks too but silent for
// the 5 ms after the failure at 50 ms.
func TestSeries(t *testing.T) {
	ms := int64(time.Millisecond)
	var ss []sample
	var sunk int64
	for i := int64(0); i <= 120; i++ {
		if i > 0 && (i <= 50 || i > 55) {
			sunk += 100
		}
		ss = append(ss, sample{t: (10 + i) * ms, n: 100 * i, sunk: sunk, sunkPath: sunk / 4})
	}
	s := series(ss, 10*ms, 60*ms, 10*time.Millisecond, 1000)
	if s == nil || s.BucketMS != 10 || s.StartMS != -50 || len(s.SourcesRPS) != 12 {
		t.Fatalf("series %+v", s)
	}
	for i := range 12 {
		wantSink := int64(100_000)
		if i == 5 {
			wantSink = 50_000 // the bucket from the failure: half of it silent
		}
		if s.SourcesRPS[i] != 100_000 || s.SinksRPS[i] != wantSink || s.SinksAffectedRPS[i] != wantSink/4 {
			t.Errorf("bucket %d: sources %d, sinks %d (path %d), want 100000, %d", i, s.SourcesRPS[i], s.SinksRPS[i], s.SinksAffectedRPS[i], wantSink)
		}
	}
	if s := series(ss, 10*ms, 60*ms, 10*time.Millisecond, 4); len(s.SourcesRPS) != 4 {
		t.Errorf("%d buckets, want the bound 4", len(s.SourcesRPS))
	}
	if s := series(ss, -1, 60*ms, 10*time.Millisecond, 1000); s != nil {
		t.Errorf("a series without emission: %+v", s)
	}
}
