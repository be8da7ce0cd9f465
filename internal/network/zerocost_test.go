package network

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"testing"
	"time"
)

// untimedGolden holds, per scenario, the SHA-256 of every buffer (length, then bytes) a reader receives from
// an untimed producer script (one that never sends a watermark), as computed by this package before
// watermark events existed (commit b15f346, with this file copied in). A job without event time must send
// exactly those bytes, over every transport: watermarks cost it nothing on the wire, and a reconnectable
// subpartition with nothing to re-send re-sends nothing.
var untimedGolden = map[string]string{
	"pipelined":     "bdf70da1d4e03f5bf7b2e34f4ff1913a4898931b871e2d561a20a84226a8aa8a",
	"reconnectable": "1ebff054320e305a0ba8fb3d0b8d8f1250c31ea39a3cc193b7b50cac0733d9d1",
}

// TestUntimedStreamSendsTodaysBytes runs records that fill, span and end buffers, barriers, cancel
// markers, end of data and end of partition through a pipelined partition, and through a reconnectable one
// whose reader is replaced mid-stream, and compares what the readers receive with untimedGolden.
func TestUntimedStreamSendsTodaysBytes(t *testing.T) {
	const bufSize = HeaderSize + 44
	script := func(p *ResultPartition, from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if err := p.EmitRecord(0, record(i, (i*37)%130)); err != nil {
				t.Fatal(err)
			}
			var err error
			switch i % 9 {
			case 3:
				err = p.BroadcastEvent(Event{Type: EventBarrier, CheckpointID: int64(i), TimestampMillis: 1000 + int64(i), Flags: uint32(i % 2)})
			case 5:
				err = p.BroadcastEvent(Event{Type: EventCancelCheckpoint, CheckpointID: int64(i)})
			case 7:
				p.Flush(0)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name          string
		reconnectable bool
	}{{"pipelined", false}, {"reconnectable", true}} {
		t.Run(tc.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, _ := env.partition(1, bufSize, 256, PartitionOptions{Reconnectable: tc.reconnectable})
				sum := sha256.New()
				r := openHashReader(t, env, p, 0, sum)
				script(p, 0, 40)
				if tc.reconnectable {
					// A last barrier marks the end of what the first reader must read before it leaves.
					if err := p.BroadcastEvent(Event{Type: EventBarrier, CheckpointID: 999}); err != nil {
						t.Fatal(err)
					}
					r.readUntil(t, func() bool { return r.last.Type == EventBarrier && r.last.CheckpointID == 999 })
					r.ch.Release()
					env.waitIdle()
					script(p, 40, 20) // dropped, but for the partly filled buffer
					r = openHashReader(t, env, p, 1, sum)
				}
				script(p, 60, 30)
				if err := p.BroadcastEvent(Event{Type: EventEndOfData}); err != nil {
					t.Fatal(err)
				}
				if err := p.Finish(); err != nil {
					t.Fatal(err)
				}
				r.readUntilEnd(t)
				if got := hex.EncodeToString(sum.Sum(nil)); got != untimedGolden[tc.name] {
					t.Fatalf("the buffers of an untimed stream hash to %s, want %s (as before watermarks)", got, untimedGolden[tc.name])
				}
				r.ch.Release()
				env.waitIdle()
				p.Close()
			})
		})
	}
}

// hashReader feeds every buffer it reads, length first, into a hash.
type hashReader struct {
	ch   InputChannel
	wake chan struct{}
	sum  hash.Hash
	last Event // the last event read
}

func openHashReader(t *testing.T, env *testEnv, p *ResultPartition, attempt int32, sum hash.Hash) *hashReader {
	t.Helper()
	r := &hashReader{wake: make(chan struct{}, 1), sum: sum}
	owner := testConsumer
	owner.Number = attempt
	ch, err := env.open(p.ID(), 0, owner, 256, HeaderSize+44, func() {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ch = ch
	return r
}

// poll reads what is ready; it reports whether it read anything.
func (r *hashReader) poll(t *testing.T) bool {
	t.Helper()
	read := false
	for {
		b, err := r.ch.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return read
		}
		read = true
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(b.Len()))
		r.sum.Write(n[:])
		r.sum.Write(b.Bytes())
		if b.Kind == KindEvent {
			if e, err := DecodeEvent(b.Payload()); err != nil {
				t.Fatal(err)
			} else {
				r.last = e
			}
		}
		r.ch.Recycle(b)
	}
}

// readUntil reads until done, checked after every batch of ready buffers.
func (r *hashReader) readUntil(t *testing.T, done func() bool) {
	t.Helper()
	deadline := time.After(testWait)
	for r.poll(t); !done(); r.poll(t) {
		select {
		case <-r.wake:
		case <-deadline:
			t.Fatalf("timed out, last event %+v", r.last)
		}
	}
}

func (r *hashReader) readUntilEnd(t *testing.T) {
	t.Helper()
	r.readUntil(t, func() bool { return r.last.Type == EventEndOfPartition })
}
