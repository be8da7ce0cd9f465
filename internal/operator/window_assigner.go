package operator

import "fmt"

// WindowAssigner says which windows a record belongs to (docs/eventtime.md §4.1): TumblingWindows,
// SlidingWindows or SessionWindows. All times are epoch ms.
type WindowAssigner interface {
	// AssignWindows appends the windows of a record at ts to buf, the latest first.
	AssignWindows(ts int64, buf []TimeWindow) []TimeWindow
	// IsEventTime says the windows are of the records' timestamps, fired by the watermark; else they are
	// of the processing time at which records arrive, fired by the clock.
	IsEventTime() bool
	String() string
}

// MergingWindowAssigner is an assigner whose windows of one key merge while they overlap or touch
// (SessionWindows); the operator keeps them in a merging window set.
type MergingWindowAssigner interface {
	WindowAssigner
	mergesWindows()
}

// TumblingWindows are windows of Size, aligned to the epoch plus Offset, that do not overlap.
type TumblingWindows struct {
	Size, Offset int64
	EventTime    bool
}

// SlidingWindows are windows of Size that start every Slide (plus Offset); a record belongs to
// ceil(Size/Slide) of them.
type SlidingWindows struct {
	Size, Slide, Offset int64
	EventTime           bool
}

// SessionWindows are, per key, the record times plus Gap, merged while they overlap or touch.
type SessionWindows struct {
	Gap       int64
	EventTime bool
}

// floorMod is x mod m in [0, m), also for negative x.
func floorMod(x, m int64) int64 {
	r := x % m
	if r < 0 {
		r += m
	}
	return r
}

func domain(eventTime bool) string {
	if eventTime {
		return "event-time"
	}
	return "processing-time"
}

// AssignWindows implements WindowAssigner.
func (a TumblingWindows) AssignWindows(ts int64, buf []TimeWindow) []TimeWindow {
	start := ts - floorMod(ts-a.Offset, a.Size)
	return append(buf, TimeWindow{Start: start, End: start + a.Size})
}

// IsEventTime implements WindowAssigner.
func (a TumblingWindows) IsEventTime() bool { return a.EventTime }

func (a TumblingWindows) String() string { return domain(a.EventTime) + " tumbling windows" }

// AssignWindows implements WindowAssigner.
func (a SlidingWindows) AssignWindows(ts int64, buf []TimeWindow) []TimeWindow {
	last := ts - floorMod(ts-a.Offset, a.Slide)
	for s := last; s > ts-a.Size; s -= a.Slide {
		buf = append(buf, TimeWindow{Start: s, End: s + a.Size})
	}
	return buf
}

// IsEventTime implements WindowAssigner.
func (a SlidingWindows) IsEventTime() bool { return a.EventTime }

func (a SlidingWindows) String() string { return domain(a.EventTime) + " sliding windows" }

// AssignWindows implements WindowAssigner.
func (a SessionWindows) AssignWindows(ts int64, buf []TimeWindow) []TimeWindow {
	return append(buf, TimeWindow{Start: ts, End: ts + a.Gap})
}

// IsEventTime implements WindowAssigner.
func (a SessionWindows) IsEventTime() bool { return a.EventTime }

func (a SessionWindows) String() string { return domain(a.EventTime) + " session windows" }

func (SessionWindows) mergesWindows() {}

// checkAssigner refuses an assigner whose windows would be empty or never advance.
func checkAssigner(a WindowAssigner) error {
	switch a := a.(type) {
	case TumblingWindows:
		if a.Size <= 0 {
			return fmt.Errorf("%s: size %d ms", a, a.Size)
		}
	case SlidingWindows:
		if a.Size <= 0 || a.Slide <= 0 {
			return fmt.Errorf("%s: size %d ms, slide %d ms", a, a.Size, a.Slide)
		}
	case SessionWindows:
		if a.Gap <= 0 {
			return fmt.Errorf("%s: gap %d ms", a, a.Gap)
		}
	case nil:
		return fmt.Errorf("no window assigner")
	}
	return nil
}
