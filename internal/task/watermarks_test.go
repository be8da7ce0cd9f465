package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/watermark"
)

// wmChain is a chain with a timed input 0 and an untimed input 1 that logs the watermarks, statuses and
// end of input the task hands it.
type wmChain struct {
	*finishChain
	mu  sync.Mutex
	got []string
}

func (c *wmChain) InputTimed(input int) bool { return input == 0 }

func (c *wmChain) note(s string) {
	c.mu.Lock()
	c.got = append(c.got, s)
	c.mu.Unlock()
}

func (c *wmChain) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *wmChain) ProcessWatermark(ms int64) error {
	if ms == math.MaxInt64 {
		c.note("wm max")
	} else {
		c.note(fmt.Sprint("wm ", ms))
	}
	return nil
}

func (c *wmChain) ProcessWatermarkStatus(idle bool) error {
	if idle {
		c.note("idle")
	} else {
		c.note("active")
	}
	return nil
}

func (c *wmChain) EndInput() error { c.note("end input"); return nil }

func (c *wmChain) RestoreWatermark(floor int64) error {
	c.note(fmt.Sprint("restored at ", floor))
	return nil
}

// TestWatermarkEvents wires a task's valve to real partitions: two channels of a timed input and one of an
// untimed input. The task hands its chain the minimum over the active timed channels, only when it
// advanced; idleness and re-activation in the valve's order; the end of time once every timed channel
// ended, before EndInput. A watermark on the untimed input fails the task.
func TestWatermarkEvents(t *testing.T) {
	defer goleak.VerifyNone(t)
	type step struct {
		ch   int    // producer channel: 0 and 1 timed, 2 untimed
		send string // "wm N", "idle", "active", "end"
		want []string
	}
	cases := []struct {
		name    string
		steps   []step
		wantErr string
		// floor, when set, restores the task from a checkpoint whose watermark floor it is.
		floor int64
	}{
		{name: "min, idleness, catching up, end", steps: []step{
			{0, "wm 10", nil},
			{1, "wm 5", []string{"wm 5"}},
			{1, "wm 20", []string{"wm 10"}},
			{1, "wm 20", nil}, // repeated: ignored
			{0, "idle", []string{"wm 20"}},
			{1, "idle", []string{"idle"}},
			{0, "active", []string{"active"}}, // at 10, below the output: catching up, holds nothing back
			{0, "wm 15", nil},
			{0, "wm 25", []string{"wm 25"}},
			{2, "end", nil},
			{0, "end", []string{"idle"}}, // the last active channel finished; channel 1 is still idle
			{1, "end", []string{"active", "wm max", "end input"}},
		}},
		{name: "restored at a floor", floor: 50, steps: []step{
			{0, "wm 10", nil}, // below the floor: behind
			{1, "wm 40", nil},
			{0, "wm 60", nil},
			{1, "wm 55", []string{"wm 55"}},
			{2, "end", nil},
			{0, "end", nil},
			{1, "end", []string{"wm max", "end input"}},
		}},
		{name: "watermark on an untimed input", steps: []step{{2, "wm 3", nil}},
			wantErr: "input channel 2: watermark on an input without event time"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFinishHarness(t)
			pool, err := h.mem.NewPool("producers", 12)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Destroy()
			cancel := make(chan struct{})
			defer close(cancel)
			var parts []*network.ResultPartition
			var inputs []deploy.InputSpec
			for i := range 3 {
				id := ident.PartitionID{Result: ident.ResultID(10 + i), Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: ident.VertexID(5 + i)}}}
				p, err := network.NewResultPartition(id, network.PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 10}, pool, cancel)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.pm.Register(p); err != nil {
					t.Fatal(err)
				}
				parts = append(parts, p)
				spec := deploy.ChannelSpec{Partition: id, Subpartition: 0, Local: true}
				if i < 2 {
					if len(inputs) == 0 {
						inputs = append(inputs, deploy.InputSpec{})
					}
					inputs[0].Channels = append(inputs[0].Channels, spec)
				} else {
					inputs = append(inputs, deploy.InputSpec{Channels: []deploy.ChannelSpec{spec}})
				}
			}
			c := &wmChain{finishChain: &finishChain{}}
			cfg := Config{
				Info:   deploy.Info{JobName: "wm", VertexName: "window", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}}, Parallelism: 1, MaxParallelism: 1},
				Inputs: inputs, Chain: func(rt *Runtime) (Chain, error) { c.rt = rt; return c, nil },
				BufferTimeout: -1, MaxRecordSize: 1 << 10,
			}
			var want []string
			if tc.floor != 0 {
				blob := checkpoint.NewBlob(checkpoint.BlobMemory{})
				floor := binary.LittleEndian.AppendUint64(nil, uint64(tc.floor))
				err := encodeStates(blob, []StateWriter{{Operator: watermarkName, Write: func(w io.Writer) error { _, err := w.Write(floor); return err }}})
				if err != nil {
					t.Fatal(err)
				}
				cfg.Restore = &deploy.RestoreSpec{CheckpointID: 1, Handle: checkpoint.StateHandle{Blobs: []checkpoint.BlobRef{{}}},
					Read: func(context.Context, checkpoint.BlobRef) ([]byte, error) { return blob.Payload(), nil }}
				want = append(want, fmt.Sprint("restored at ", tc.floor))
			}
			tk, wait := h.start(cfg)
			for i, s := range tc.steps {
				p := parts[s.ch]
				var err error
				switch {
				case strings.HasPrefix(s.send, "wm "):
					var ms int64
					fmt.Sscan(strings.TrimPrefix(s.send, "wm "), &ms)
					err = p.BroadcastWatermark(ms)
				case s.send == "idle":
					err = p.BroadcastWatermarkStatus(true)
				case s.send == "active":
					err = p.BroadcastWatermarkStatus(false)
				case s.send == "end":
					err = p.Finish()
				}
				if err != nil {
					t.Fatal(err)
				}
				if tc.wantErr != "" {
					break
				}
				want = append(want, s.want...)
				// The next step's channel may be read first: wait until this one's effect is seen. A step
				// with no effect is held to that at the next step with one, or at the end.
				deadline := time.Now().Add(10 * time.Second)
				for len(c.seen()) < len(want) && time.Now().Before(deadline) {
					time.Sleep(200 * time.Microsecond)
				}
				if got := c.seen(); !slices.Equal(got, want) {
					t.Fatalf("after step %d (%d: %s): chain got %q, want %q", i, s.ch, s.send, got, want)
				}
			}
			if tc.wantErr != "" {
				u := h.await("FAILED")
				wait()
				if u.Err == nil || !strings.Contains(u.Err.Error(), tc.wantErr) {
					t.Fatalf("task failed with %v, want %q", u.Err, tc.wantErr)
				}
				return
			}
			h.await("FINISHED")
			wait()
			if got := tk.Counters().PublishedWatermark(); got != math.MaxInt64 {
				t.Errorf("published watermark %d at the end, want the end of time", got)
			}
		})
	}
}

// TestValveEntryRoundTrip: the valve entry gives back the snapshots it was made of, and refuses bytes that
// are not one, naming what is wrong.
func TestValveEntryRoundTrip(t *testing.T) {
	v := watermark.NewTwoInputValve(2, 3)
	v.OnWatermark(0, 0, 10)
	v.OnWatermark(0, 1, 20)
	v.OnIdle(1, 2)
	s := v.Snapshot()
	b := encodeValves(s[:])
	got, err := decodeValves(b)
	if err != nil {
		t.Fatal(err)
	}
	if r := watermark.NewTwoInputValveFrom([3]watermark.ValveSnapshot(got)); r.Current() != v.Current() || len(got[1].Channels) != 3 {
		t.Fatalf("decoded %+v, want %+v", got, s)
	}
	for _, bad := range [][]byte{nil, {2, 1}, {1, 2}, b[:len(b)-1], append(slices.Clone(b), 0), {1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := decodeValves(bad); err == nil || !strings.Contains(err.Error(), "valve entry") {
			t.Errorf("decodeValves(%v): %v, want an error naming the valve entry", bad, err)
		}
	}
	flipped := slices.Clone(b)
	flipped[2+8+1+8] = 7 // the first channel's status
	if _, err := decodeValves(flipped); err == nil {
		t.Error("a status of 7 decoded")
	}
}
