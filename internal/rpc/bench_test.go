package rpc

import (
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// benchDeploy is a typical deployment: a keyed subtask of parallelism 8 reading a hash shuffle from 8
// producers over TCP, with one output, restoring a checkpoint of one blob.
func benchDeploy() protocol.Envelope {
	me := ident.Attempt{Subtask: ident.Subtask{Vertex: 2, Index: 3}, Number: 1}
	var in deploy.InputSpec
	for p := range int32(8) {
		in.Channels = append(in.Channels, deploy.ChannelSpec{
			Partition:    ident.PartitionID{Result: 1, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 1, Index: p}}},
			Subpartition: 3, Address: "10.0.0.7:41234", Job: [16]byte{1, 2, 3}, Credential: [32]byte{4, 5, 6, 7}})
	}
	d := jobcore.Deployment{
		Info:    deploy.Info{JobName: "sequence", VertexName: "check", Attempt: me, Parallelism: 8, MaxParallelism: 128, TaskManager: "tm-2"},
		Outputs: []deploy.OutputSpec{{Result: 2, Subpartitions: 8}},
		Inputs:  []deploy.InputSpec{in}, BufferTimeout: 10 * time.Millisecond, MaxRecordSize: 1 << 20, CreditsPerChannel: 2,
		StateBackend: "memory", SkipCheckpointsUpTo: 4, Checkpoints: &jobcore.CheckpointSettings{FinalCheckpoint: true},
		Restore: &deploy.RestoreSpec{CheckpointID: 4, SameRun: true, Handle: checkpoint.StateHandle{Attempt: me,
			Blobs: []checkpoint.BlobRef{{Key: "v2-3-a0-state", Size: 4096, CRC: 0xdeadbeef}}}},
	}
	return protocol.Envelope{Job: protocol.JobID{1, 2, 3}, Body: jobcore.Deploy{Deployment: d}}
}

// benchCounters is one TaskManager's counter push with 8 running attempts.
func benchCounters() protocol.Envelope {
	var c jobcore.Counters
	for i := range int32(8) {
		c.Counts = append(c.Counts, jobcore.AttemptCounters{Attempt: ident.Attempt{Subtask: ident.Subtask{Vertex: ident.VertexID(i % 3), Index: i}},
			In: 1_234_567 + uint64(i), Out: 7_654_321 + uint64(i)})
	}
	return protocol.Envelope{Job: protocol.JobID{1, 2, 3}, Body: c}
}

// benchPipe measures one message through a Pipe: convert, marshal, queue, unmarshal, convert back.
func benchPipe(b *testing.B, env protocol.Envelope, fromJM bool) {
	jm, tm := Pipe()
	from, to := tm, jm
	if fromJM {
		from, to = jm, tm
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := from.Send(env); err != nil {
			b.Fatal(err)
		}
		if _, err := to.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPipeDeploy(b *testing.B)   { benchPipe(b, benchDeploy(), true) }
func BenchmarkPipeCounters(b *testing.B) { benchPipe(b, benchCounters(), false) }

// BenchmarkGRPCCounters measures the gRPC session's throughput over loopback TCP: b.N counter pushes from
// a TaskManager, read by the JobManager.
func BenchmarkGRPCCounters(b *testing.B) {
	g := startGateway(b, defaultSessionConfig)
	jm, tm := g.connect(b)
	env := benchCounters()
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan error, 1)
	go func() {
		for range b.N {
			if _, err := jm.Recv(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		if err := tm.Send(env); err != nil {
			b.Fatal(err)
		}
		// Keep within the queue's bound: the reader keeps up on average, a burst may not.
		for queued(tm) > protocol.SendQueue/2 {
			time.Sleep(10 * time.Microsecond)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
