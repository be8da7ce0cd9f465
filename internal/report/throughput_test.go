package report

import (
	"testing"
	"time"
)

// TestThroughput: rates per vertex from the differences of its subtasks' counters over the time between
// two results; a subtask whose attempt changed counts its new attempt's records from 0; the ring keeps
// the last MaxThroughputSamples.
func TestThroughput(t *testing.T) {
	at := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	result := func(a0, a1 int, in0, out0, in1, out1 uint64) *JobResult {
		return &JobResult{Vertices: []VertexResult{{Name: "map", BusyMsPerSecond: 300, BackpressuredMsPerSecond: 650, Subtasks: []SubtaskResult{
			{Index: 0, Attempt: a0, RecordsIn: in0, RecordsOut: out0},
			{Index: 1, Attempt: a1, RecordsIn: in1, RecordsOut: out1},
		}}}}
	}
	for _, tc := range []struct {
		name    string
		next    *JobResult
		after   time.Duration
		in, out float64
	}{
		{"steady", result(0, 0, 1100, 1000, 2200, 2000), time.Second, 300, 2000},
		{"half a second", result(0, 0, 1100, 1000, 2200, 2000), 500 * time.Millisecond, 600, 4000},
		{"subtask 1 restarted", result(0, 1, 1100, 1000, 50, 40), time.Second, 150, 1040},
		{"a counter that went back counts nothing", result(0, 0, 900, 1000, 2000, 1000), time.Second, 0, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tp Throughput
			tp.Add(at, result(0, 0, 1000, 0, 2000, 1000))
			if s := tp.Samples(); len(s) != 0 {
				t.Fatalf("the first result made samples %+v", s)
			}
			tp.Add(at.Add(tc.after), tc.next)
			s := tp.Samples()
			if len(s) != 1 || len(s[0].Vertices) != 1 || !s[0].At.Equal(at.Add(tc.after)) {
				t.Fatalf("samples %+v", s)
			}
			if v := s[0].Vertices[0]; v.Name != "map" || v.RecordsInPerSecond != tc.in || v.RecordsOutPerSecond != tc.out ||
				v.BusyMsPerSecond != 300 || v.BackpressuredMsPerSecond != 650 {
				t.Fatalf("rates %+v, want in %v out %v", v, tc.in, tc.out)
			}
		})
	}
	var tp Throughput
	for i := 0; i <= MaxThroughputSamples+10; i++ {
		tp.Add(at.Add(time.Duration(i)*time.Second), result(0, 0, uint64(i), uint64(i), 0, 0))
	}
	s := tp.Samples()
	if len(s) != MaxThroughputSamples || !s[0].At.Equal(at.Add(11*time.Second)) || !s[len(s)-1].At.Equal(at.Add((MaxThroughputSamples+10)*time.Second)) {
		t.Fatalf("%d samples from %v to %v, want the last %d", len(s), s[0].At, s[len(s)-1].At, MaxThroughputSamples)
	}
}
