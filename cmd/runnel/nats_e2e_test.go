package main

import (
	"context"
	be "encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runnel-dev/runnel/cmd/runnel/internal/proccluster"
)

// natsSumProgram is a user's job binary: running sums per key from one JetStream stream to another. A key's
// messages all have one subject (in.KEY mod 4), so one source subtask reads them in stream order and a
// replay makes the same running sums, which the sink publishes with the ids KEY:SUM: the output stream
// drops the copies a replay writes again. --rate throttles each source subtask, so that a run lasts long
// enough for a TaskManager to be killed in the middle of it.
const natsSumProgram = `package main

import (
	be "encoding/binary"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector/nats"
)

func main() {
	runnel.RegisterJob("natssum", "running sums per key, JetStream to JetStream, exactly once", func(flags *pflag.FlagSet) runnel.Job {
		j := &job{}
		flags.StringVar(&j.url, "url", "", "NATS server URL")
		flags.Float64Var(&j.rate, "rate", 0, "messages per second of each source subtask (0: as fast as it goes)")
		return j
	})
	runnel.Main()
}

type kv = codec.Tuple2[int64, int64]

type job struct {
	url  string
	rate float64
}

func (j *job) Build(env *runnel.Environment, args []string) error {
	if len(args) > 0 || j.url == "" {
		return fmt.Errorf("natssum needs --url, and no arguments")
	}
	decode := func(m nats.Msg) (kv, error) {
		if len(m.Data) != 16 {
			return kv{}, fmt.Errorf("message of %d bytes", len(m.Data))
		}
		return kv{F0: int64(be.BigEndian.Uint64(m.Data)), F1: int64(be.BigEndian.Uint64(m.Data[8:]))}, nil
	}
	src := runnel.FromSource(env, nats.Source(nats.SourceConfig{URL: j.url, Stream: "IN", Subjects: []string{"in.0", "in.1", "in.2", "in.3"},
		Bounded: true}, decode)).Name("nats-in").Uid("nats-in").WithCodec(codec.MustStruct[kv]())
	// The throttle is chained to the source, so that messages wait there rather than in the buffers
	// before the sum, where they would hold back the checkpoints' barriers.
	rate := j.rate
	throttled := runnel.MapWith(src, func() runnel.MapFunction[kv, kv] { return &throttle{rate: rate} }).Name("throttle")
	sums := runnel.Reduce(runnel.KeyBy(throttled, func(v kv) int64 { return v.F0 }),
		func(a, b kv) (kv, error) { a.F1 += b.F1; return a, nil }).Name("sum").Uid("sum")
	sums.SinkTo(nats.Sink(nats.SinkConfig{URL: j.url, Stream: "OUT", Subject: "out"}, func(v kv) (nats.Msg, error) {
		data := be.BigEndian.AppendUint64(be.BigEndian.AppendUint64(nil, uint64(v.F0)), uint64(v.F1))
		return nats.Msg{Data: data, ID: fmt.Sprintf("%d:%d", v.F0, v.F1)}, nil
	})).Name("nats-out").Uid("nats-out")
	return nil
}
` + throttleProgram

// TestNATSExactlyOnceKilledTaskManager runs JetStream → running sums → JetStream on a JobManager and three
// TaskManager processes, the input a work queue (it deletes each message as the source acknowledges it,
// when the checkpoint covering it completes), and SIGKILLs the TaskManager that runs the source's subtask
// 0 once a checkpoint completed and sums were written: the killed process's connections and consumer pulls
// die with it, the job restores the checkpoint on the TaskManagers that remain, and the output stream holds
// every running sum of every key once and in order. At the end the work queue is empty (every message read
// and acknowledged) and no consumer is left.
func TestNATSExactlyOnceKilledTaskManager(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready after 10 s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	url := s.ClientURL()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{{Name: "IN", Subjects: []string{"in.*"}, Retention: jetstream.WorkQueuePolicy},
		{Name: "OUT", Subjects: []string{"out"}, Duplicates: 2 * time.Minute}} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	const n, keys = 20_000, 13
	for i := range int64(n) {
		k := i % keys
		data := be.BigEndian.AppendUint64(be.BigEndian.AppendUint64(nil, uint64(k)), uint64(i))
		if _, err := js.PublishAsync(fmt.Sprintf("in.%d", k%4), data, jetstream.WithStallWait(20*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the input's publishes not acknowledged after 60 s")
	}

	bin := buildUserBinary(t, []byte(natsSumProgram))
	dir := t.TempDir()
	tc := startClusterWith(t, proccluster.Spec{TaskManagers: 3, Slots: 2, Process: proccluster.Options{Binary: bin, Dir: dir}})
	report := filepath.Join(dir, "r.json")
	// 2 source subtasks at 2500 messages/s each: about 4 s, so that the kill lands mid-run.
	sp, err := proccluster.Start("submit", proccluster.Options{Binary: bin, Dir: dir}, "submit", "natssum", "--jobmanager", tc.addr,
		"--url", url, "--rate", "2500", "--parallelism", "2", "--failover", "region", "--checkpoint-interval", "100ms",
		"--checkpoint-storage", filepath.Join(dir, "chk"), "--report", report)
	if err != nil {
		t.Fatal(err)
	}
	sub := &process{sp}
	t.Cleanup(func() { _ = sp.Kill(); logIfFailed(t, sp) })

	// The kill waits for a completed checkpoint (so the work queue lost messages to acknowledgements) and
	// for sums in the output.
	victim := killMidRun(t, tc, sub, report, "nats-in", "sums written", func() bool {
		return streamState(t, js, "OUT").Msgs > 0 && streamState(t, js, "IN").Msgs < n
	})

	// Every running sum of every key once and in order.
	want := runningSums(n, keys)
	got := map[int64][]int64{}
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second) // the run took its own time
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, "OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	total := streamState(t, js, "OUT").Msgs
	for range total {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("reading the output: %v", err)
		}
		d := m.Data()
		k := int64(be.BigEndian.Uint64(d))
		got[k] = append(got[k], int64(be.BigEndian.Uint64(d[8:])))
	}
	checkRunningSums(t, "the output's reader", got, want)
	if left := streamState(t, js, "IN").Msgs; left != 0 {
		t.Fatalf("the work queue holds %d messages after the job finished, want 0", left)
	}
	// A deadline of their own: reading the output one message at a time may take most of the read's
	// minute on a loaded machine.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "IN")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range st.ConsumerNames(ctx).Name() {
		names = append(names, name)
	}
	if len(names) > 0 {
		t.Fatalf("consumers %q left on the input after the job finished", names)
	}
	t.Logf("%d sums written; killed %s (source subtask 0)", total, victim)
}

// streamState returns the state of stream name.
func streamState(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}
