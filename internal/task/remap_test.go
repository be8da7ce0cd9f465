package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
)

// remapChain records what a re-mapped restore hands it.
type remapChain struct {
	NoEventTime
	finishChain
	whole    map[string]string
	parts    map[string][]string
	restored []int64
}

func (c *remapChain) Restore(states map[string][]byte) error {
	for k, v := range states {
		c.whole[k] = string(v)
	}
	return nil
}

func (c *remapChain) RestoreRescaled(parts map[string][][]byte) error {
	for k, vs := range parts {
		for _, v := range vs {
			c.parts[k] = append(c.parts[k], string(v))
		}
	}
	return nil
}

func (c *remapChain) RestoreWatermark(floor int64) error {
	c.restored = append(c.restored, floor)
	return nil
}

// TestRestoreRemapped pins how a subtask of a re-mapped job combines its reads: each operator takes its
// entry whole (same parallelism) or as parts (another), entries of other operators and channel positions
// are left behind, the lowest watermark floor holds, and it finished or its input ended only if every read
// says so; a mix, or a blob without an entry its metadata lists, is refused with a message saying so.
func TestRestoreRemapped(t *testing.T) {
	type blob struct {
		entries map[string]string
		floor   int64 // 0: none
		ended   bool
	}
	blobs := map[string]blob{
		"a0": {entries: map[string]string{"src": "s0", "double": "d0"}, floor: 500},
		"b0": {entries: map[string]string{"sum": "sum0"}, floor: 300},
		"b1": {entries: map[string]string{"sum": "sum1"}, floor: 400},
		"e0": {entries: map[string]string{"sum": "e"}, ended: true},
		"e1": {entries: map[string]string{"src": "e"}, ended: true},
	}
	read := func(key string, ops []string, rescaled int) deploy.StateRead {
		return deploy.StateRead{Handle: checkpoint.StateHandle{Blobs: []checkpoint.BlobRef{{Key: key}}}, Operators: ops, RescaledFrom: rescaled}
	}
	finished := deploy.StateRead{Handle: checkpoint.StateHandle{Finished: true}}
	for _, tc := range []struct {
		name     string
		reads    []deploy.StateRead
		whole    map[string]string
		parts    map[string][]string
		floor    []int64
		finished bool
		ended    bool
		wantErr  string
	}{
		{name: "whole and parts", reads: []deploy.StateRead{read("a0", []string{"src"}, 0), read("b0", []string{"sum"}, 2), read("b1", []string{"sum"}, 2)},
			whole: map[string]string{"src": "s0"}, parts: map[string][]string{"sum": {"sum0", "sum1"}}, floor: []int64{300}},
		{name: "all finished", reads: []deploy.StateRead{finished, finished}, finished: true},
		{name: "finished and not", reads: []deploy.StateRead{finished, read("a0", []string{"src"}, 0)}, wantErr: "1 of the 2 old subtasks whose state it takes had finished"},
		{name: "all ended", reads: []deploy.StateRead{read("e0", []string{"sum"}, 0), read("e1", []string{"src"}, 0)},
			whole: map[string]string{"sum": "e", "src": "e"}, ended: true},
		{name: "ended and not", reads: []deploy.StateRead{read("e0", []string{"sum"}, 0), read("a0", []string{"src"}, 0)}, wantErr: "the input had ended in 1 of the 2"},
		{name: "ended and rescaled", reads: []deploy.StateRead{read("e0", []string{"sum"}, 2)}, wantErr: "cannot rescale operators [sum]"},
		{name: "entry missing", reads: []deploy.StateRead{read("a0", []string{"src", "tag"}, 0)}, wantErr: "holds 1 of the 2 operators [src tag]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &remapChain{whole: map[string]string{}, parts: map[string][]string{}}
			r := &run{t: &Task{cfg: Config{Info: deploy.Info{JobName: "j", VertexName: "v", Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: 1}}, Parallelism: 3}},
				counters: NewCounters()}, chain: c, cp: newCheckpointer(nil, ident.Attempt{}, nil)}
			finished, err := r.restoreRemapped(&deploy.RestoreSpec{CheckpointID: 7, Reads: tc.reads}, func(_ context.Context, ref checkpoint.BlobRef) ([]byte, error) {
				b, ok := blobs[ref.Key]
				if !ok {
					return nil, fmt.Errorf("no blob %q", ref.Key)
				}
				var ws []StateWriter
				for _, k := range slices.Sorted(maps.Keys(b.entries)) {
					v := b.entries[k]
					ws = append(ws, StateWriter{Operator: k, Write: func(w io.Writer) error { _, err := io.WriteString(w, v); return err }})
				}
				if b.floor != 0 {
					f := binary.LittleEndian.AppendUint64(nil, uint64(b.floor))
					ws = append(ws, StateWriter{Operator: watermarkName, Write: func(w io.Writer) error { _, err := w.Write(f); return err }})
				}
				if b.ended {
					ws = append(ws, StateWriter{Operator: inputEndedName, Write: func(io.Writer) error { return nil }})
				}
				ws = append(ws, StateWriter{Operator: channelPositionsName, Write: func(w io.Writer) error { _, err := w.Write([]byte{0}); return err }})
				blob := checkpoint.NewBlob(checkpoint.BlobMemory{})
				if err := encodeStates(blob, ws); err != nil {
					return nil, err
				}
				return blob.Payload(), nil
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "checkpoint 7") {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if finished != tc.finished || r.fin.restoredEnded != tc.ended {
				t.Fatalf("finished %v, ended %v; want %v, %v", finished, r.fin.restoredEnded, tc.finished, tc.ended)
			}
			if tc.whole == nil {
				tc.whole = map[string]string{}
			}
			if tc.parts == nil {
				tc.parts = map[string][]string{}
			}
			if !maps.Equal(c.whole, tc.whole) || fmt.Sprint(c.parts) != fmt.Sprint(tc.parts) || !slices.Equal(c.restored, tc.floor) {
				t.Fatalf("whole %v, parts %v, floor %v; want %v, %v, %v", c.whole, c.parts, c.restored, tc.whole, tc.parts, tc.floor)
			}
		})
	}
}
