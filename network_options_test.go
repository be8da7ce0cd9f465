package runnel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// buffersJob runs generator -> keyBy -> sum -> collect at parallelism 2 with opts and returns the result, the
// final sum of every key, and the error.
func buffersJob(t *testing.T, records uint64, opts ...runnel.Option) (*runnel.JobResult, map[int64]int64, error) {
	t.Helper()
	env := runnel.NewEnvironment(append([]runnel.Option{runnel.WithParallelism(2), runnel.WithLogger(quiet)}, opts...)...)
	src := runnel.FromSource(env, connector.Generator(func(_ int, s uint64) [2]int64 { return [2]int64{int64(s % 7), 1} },
		connector.GeneratorOptions{TotalRecords: records})).Name("source")
	sums := runnel.Reduce(runnel.KeyBy(src, func(r [2]int64) int64 { return r[0] }),
		func(acc, r [2]int64) ([2]int64, error) { acc[1] += r[1]; return acc, nil }).Name("sum")
	out := connector.NewCollect[[2]int64]()
	sums.SinkTo(out).Name("sink")
	res, err := env.Execute(context.Background(), "buffers")
	final := map[int64]int64{}
	for _, r := range out.Records() {
		final[r[0]] = r[1]
	}
	return res, final, err
}

// TestNetworkBuffersPerChannel runs a job with the shortest and a long network queue, and shows that the
// setting reaches the tasks: a queue longer than the TaskManager's network memory fails the deployment.
func TestNetworkBuffersPerChannel(t *testing.T) {
	const records = 50_000
	for _, n := range []int{1, runnel.DefaultNetworkBuffersPerChannel, 64} {
		res, final, err := buffersJob(t, records, runnel.WithNetworkBuffersPerChannel(n))
		if err != nil || res.Status != "FINISHED" {
			t.Fatalf("%d buffers per channel: %v (%v)", n, err, res)
		}
		var total int64
		for _, v := range final {
			total += v
		}
		if total != records || len(final) != 7 {
			t.Fatalf("%d buffers per channel: %d records over %d keys, want %d over 7", n, total, len(final), records)
		}
	}
	// 64 buffers of network memory: the default queues fit (two subpartitions of 4 buffers and 2 shared
	// per source subtask), 40 per subpartition do not.
	const bufferSize = 4096
	mem := runnel.WithNetworkMemory(64 * bufferSize)
	if res, _, err := buffersJob(t, 1000, runnel.WithBufferSize(bufferSize), mem); err != nil || res.Status != "FINISHED" {
		t.Fatalf("default queues in 64 buffers: %v", err)
	}
	res, _, err := buffersJob(t, 1000, runnel.WithBufferSize(bufferSize), mem, runnel.WithNetworkBuffersPerChannel(40))
	// 2 subpartitions of 40 buffers and 2 shared.
	if err == nil || res == nil || res.Status != "FAILED" || !strings.Contains(err.Error(), "output needs 82 buffers") {
		t.Fatalf("40 buffers per subpartition in 64 buffers of network memory: want the job FAILED for want of 82 buffers, got %v", err)
	}
}

// TestNetworkBuffersPerChannelRefused gives WithNetworkBuffersPerChannel values it must refuse at
// submission, with a message that names it.
func TestNetworkBuffersPerChannelRefused(t *testing.T) {
	for _, tc := range []struct {
		opts []runnel.Option
		want string
	}{
		{[]runnel.Option{runnel.WithNetworkBuffersPerChannel(0)}, "between 1 and 1024 buffers (MaxNetworkBuffersPerChannel), got 0"},
		{[]runnel.Option{runnel.WithNetworkBuffersPerChannel(-3)}, "got -3"},
		{[]runnel.Option{runnel.WithNetworkBuffersPerChannel(runnel.MaxNetworkBuffersPerChannel + 1)}, "got 1025"},
		{[]runnel.Option{runnel.WithNetworkMemory(1 << 20), runnel.WithNetworkBuffersPerChannel(64)},
			"64 buffers of 32768 bytes are 2097152 bytes, more than the 1048576 bytes of network memory (WithNetworkMemory)"},
	} {
		res, _, err := buffersJob(t, 10, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), "WithNetworkBuffersPerChannel: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming WithNetworkBuffersPerChannel with %q, got %v", tc.want, err)
		}
		if res != nil {
			t.Errorf("a refused job ran: %v", res.Status)
		}
	}
}
