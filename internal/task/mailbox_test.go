package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMailboxCoalesces pins the mailbox's bounds and what it does past them: completions merge into the
// highest id, aborts stay individual up to maxPendingAborts and fold the oldest into an abort-up-to mark
// beyond, an abort voids its checkpoint's waiting trigger, triggers past maxPendingTriggers are refused,
// and an ended task refuses everything and hands back the triggers that waited (to be declined).
func TestMailboxCoalesces(t *testing.T) {
	type op struct {
		kind string // "complete", "abort", "trigger", "close"
		id   int64
		ok   bool // what the put must return
	}
	ids := func(from, to int64) []int64 {
		var out []int64
		for id := from; id <= to; id++ {
			out = append(out, id)
		}
		return out
	}
	many := func(kind string, from, to int64, ok bool) []op {
		var ops []op
		for _, id := range ids(from, to) {
			ops = append(ops, op{kind, id, ok})
		}
		return ops
	}
	triggerIDs := func(ids ...int64) []trigger {
		var out []trigger
		for _, id := range ids {
			out = append(out, trigger{id: id, timestampMillis: id * 10})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ops  []op
		want mail
		left []trigger // what close returned
	}{
		{"completions merge into the highest", many("complete", 1, 10_000, true), mail{completeUpTo: 10_000}, nil},
		{"a lower completion after a higher one", []op{{"complete", 7, true}, {"complete", 3, true}}, mail{completeUpTo: 7}, nil},
		{"aborts up to the bound stay individual", many("abort", 1, maxPendingAborts, true),
			mail{aborts: ids(1, maxPendingAborts)}, nil},
		{"aborts past the bound fold the oldest", append(many("abort", 1, 10_000, true), op{"abort", 3, true}),
			mail{abortUpTo: 10_000 - maxPendingAborts, folded: 10_000 - maxPendingAborts, aborts: ids(10_001-maxPendingAborts, 10_000)}, nil},
		{"duplicate aborts count once", []op{{"abort", 5, true}, {"abort", 2, true}, {"abort", 5, true}},
			mail{aborts: []int64{2, 5}}, nil},
		{"an abort voids its trigger", []op{{"trigger", 1, true}, {"trigger", 2, true}, {"abort", 1, true}},
			mail{aborts: []int64{1}, triggers: triggerIDs(2)}, nil},
		{"triggers past the bound are refused", append(many("trigger", 1, maxPendingTriggers, true), op{"trigger", 99, false}),
			mail{triggers: triggerIDs(ids(1, maxPendingTriggers)...)}, nil},
		{"an ended task refuses mail", []op{{"complete", 1, true}, {"close", 0, true}, {"complete", 2, false}, {"abort", 2, false},
			{"trigger", 2, false}}, mail{}, nil},
		{"an ended task hands back its waiting triggers", []op{{"trigger", 1, true}, {"trigger", 2, true}, {"abort", 1, true},
			{"complete", 1, true}, {"close", 0, true}, {"trigger", 3, false}}, mail{}, triggerIDs(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := newMailbox()
			maxLen := 0
			var left []trigger
			for _, o := range tc.ops {
				var ok bool
				switch o.kind {
				case "complete":
					ok = mb.putComplete(o.id)
				case "abort":
					ok = mb.putAbort(o.id)
				case "trigger":
					ok = mb.putTrigger(trigger{id: o.id, timestampMillis: o.id * 10})
				case "close":
					left = append(left, mb.close()...)
					ok = true
				}
				if ok != o.ok {
					t.Fatalf("%s %d returned %v", o.kind, o.id, ok)
				}
				maxLen = max(maxLen, mb.len())
			}
			if bound := maxPendingAborts + maxPendingTriggers + 2; maxLen > bound {
				t.Fatalf("the mailbox held %d entries, over its bound of %d", maxLen, bound)
			}
			var got mail
			mb.take(&got)
			if got.abortUpTo != tc.want.abortUpTo || got.folded != tc.want.folded || got.completeUpTo != tc.want.completeUpTo ||
				!slices.Equal(got.aborts, tc.want.aborts) || !slices.Equal(got.triggers, tc.want.triggers) {
				t.Fatalf("took %+v\nwant %+v", got, tc.want)
			}
			if !slices.Equal(left, tc.left) {
				t.Fatalf("close handed back %+v, want %+v", left, tc.left)
			}
			mb.take(&got)
			if !got.empty() {
				t.Fatalf("a second take found %+v", got)
			}
		})
	}
}

// blockedSource is a source chain that blocks in its first poll until released, so that mail piles up
// while the task is busy (a task stuck in a slow record), then ends. It records what the task hands it.
type blockedSource struct {
	NoEventTime
	polling, release chan struct{}
	once             sync.Once

	mu        sync.Mutex
	completed []int64
	snapshots []int64
	// heard lists the completions, aborts and the Close the chain heard, in order.
	heard []string
}

func (c *blockedSource) Open() error { return nil }
func (c *blockedSource) ProcessBuffer(int, *network.RecordDecoder) (int, error) {
	return 0, errors.New("a source has no input")
}
func (c *blockedSource) IsSource() bool { return true }
func (c *blockedSource) PollSource() (SourceStatus, error) {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return EndOfInput, nil
	}
	close(c.polling)
	<-c.release
	return MoreAvailable, nil
}
func (c *blockedSource) SourceAvailable() <-chan struct{} { return nil }
func (c *blockedSource) EndInput() error                  { return nil }
func (c *blockedSource) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heard = append(c.heard, "close")
	return nil
}
func (c *blockedSource) NotifyCheckpointAborted(id int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heard = append(c.heard, fmt.Sprintf("abort %d", id))
	return nil
}
func (c *blockedSource) Snapshot(id int64) ([]StateWriter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snapshots = append(c.snapshots, id)
	return nil, nil
}
func (c *blockedSource) Restore(map[string][]byte) error           { return nil }
func (c *blockedSource) RestoreRescaled(map[string][][]byte) error { return nil }
func (c *blockedSource) NotifyCheckpointComplete(id int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.completed = append(c.completed, id)
	c.heard = append(c.heard, fmt.Sprintf("complete %d", id))
	return nil
}

// TestFloodedMailboxDeliversEverything floods a running task that is stuck in a record with thousands of
// completion notifications, aborts and triggers, as a job master whose checkpoints keep completing and
// failing would. When the task gets back to its mailbox, the chain hears the highest completion (the
// equivalent of all of them), every trigger the mailbox accepted and no abort voided becomes a snapshot
// and an acknowledgement, and every trigger it refused was refused to the caller, who declines it.
func TestFloodedMailboxDeliversEverything(t *testing.T) {
	const completions, aborts = 5000, 5000
	store, err := checkpoint.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mem, err := network.NewNetworkMemory(1<<20, network.DefaultBufferSize)
	if err != nil {
		t.Fatal(err)
	}
	chain := &blockedSource{polling: make(chan struct{}), release: make(chan struct{})}
	var (
		mu    sync.Mutex
		acked []int64
	)
	cfg := Config{
		Info:  deploy.Info{JobName: "flood", VertexName: "source", Parallelism: 1, MaxParallelism: 128},
		Chain: func(*Runtime) (Chain, error) { return chain, nil },
		Checkpoints: &CheckpointSetup{Store: store,
			Ack: func(id int64, _ ident.Attempt, _ checkpoint.StateHandle, _ AckStats) {
				mu.Lock()
				defer mu.Unlock()
				acked = append(acked, id)
			},
			Decline: func(id int64, _ ident.Attempt, err error) { t.Errorf("checkpoint %d declined: %v", id, err) },
		},
	}
	task := New(cfg, Env{Partitions: network.NewPartitionManager(), Memory: mem, Logger: slog.New(slog.DiscardHandler)})
	go task.Run()
	<-chain.polling
	// Triggers 1, 2, ... while they are accepted; the aborts then give up every odd one.
	var accepted []int64
	for id := int64(1); ; id++ {
		if !task.TriggerCheckpoint(id, 0, 0) {
			break
		}
		accepted = append(accepted, id)
	}
	if len(accepted) != maxPendingTriggers {
		t.Fatalf("%d triggers accepted, want the bound %d", len(accepted), maxPendingTriggers)
	}
	for id := int64(1); id <= completions; id++ {
		if !task.NotifyCheckpointComplete(id) {
			t.Fatalf("completion %d refused by a running task", id)
		}
	}
	for id := int64(1); id <= aborts; id += 2 {
		if !task.AbortCheckpoint(id) {
			t.Fatalf("abort %d refused by a running task", id)
		}
	}
	if n, bound := task.mb.len(), maxPendingAborts+maxPendingTriggers+2; n > bound {
		t.Fatalf("%d entries wait in the mailbox, over its bound of %d", n, bound)
	}
	close(chain.release)
	select {
	case <-task.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not end")
	}
	if err := task.Err(); err != nil || task.State() != deploy.Finished {
		t.Fatalf("task ended %s: %v", task.State(), err)
	}
	var wantSnapshots []int64
	for _, id := range accepted {
		if id%2 == 0 {
			wantSnapshots = append(wantSnapshots, id)
		}
	}
	chain.mu.Lock()
	defer chain.mu.Unlock()
	if want := []int64{completions}; !slices.Equal(chain.completed, want) {
		t.Fatalf("the chain heard completions %v, want %v (all of them, merged)", chain.completed, want)
	}
	if !slices.Equal(chain.snapshots, wantSnapshots) {
		t.Fatalf("snapshots %v, want %v (the accepted triggers no abort voided)", chain.snapshots, wantSnapshots)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(acked)
	if !slices.Equal(acked, wantSnapshots) {
		t.Fatalf("acknowledged %v, want %v", acked, wantSnapshots)
	}
	if task.NotifyCheckpointComplete(completions+1) || task.AbortCheckpoint(1) || task.TriggerCheckpoint(99, 0, 0) {
		t.Fatal("an ended task took mail")
	}
}

// cancelledSource is a blockedSource whose blocked poll ends as a cancelled network write does: with
// network.ErrCanceled, straight out of the loop.
type cancelledSource struct{ *blockedSource }

func (c cancelledSource) PollSource() (SourceStatus, error) {
	close(c.polling)
	<-c.release
	return NothingAvailable, fmt.Errorf("emit: %w", network.ErrCanceled)
}

// TestCancelledTaskHearsTheCompletionBeforeIt: a completion that reached a task before its cancellation
// is told to the operators before they close, also when the cancellation ends the task in the middle of
// its work: a stop's savepoint is committed by its sinks.
func TestCancelledTaskHearsTheCompletionBeforeIt(t *testing.T) {
	mem, err := network.NewNetworkMemory(1<<20, network.DefaultBufferSize)
	if err != nil {
		t.Fatal(err)
	}
	chain := cancelledSource{&blockedSource{polling: make(chan struct{}), release: make(chan struct{})}}
	cfg := Config{
		Info:  deploy.Info{JobName: "stop", VertexName: "source", Parallelism: 1, MaxParallelism: 128},
		Chain: func(*Runtime) (Chain, error) { return chain, nil },
	}
	task := New(cfg, Env{Partitions: network.NewPartitionManager(), Memory: mem, Logger: slog.New(slog.DiscardHandler)})
	go task.Run()
	<-chain.polling
	task.NotifyCheckpointComplete(6)
	task.NotifyCheckpointComplete(7)
	task.Cancel()
	close(chain.release)
	select {
	case <-task.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not end")
	}
	if task.State() != deploy.Canceled {
		t.Fatalf("task ended %s: %v", task.State(), task.Err())
	}
	chain.mu.Lock()
	defer chain.mu.Unlock()
	if !slices.Equal(chain.completed, []int64{7}) {
		t.Fatalf("the operators heard completions %v, want [7]", chain.completed)
	}
}

// failingSource is a blockedSource whose blocked poll fails the task.
type failingSource struct{ *blockedSource }

func (c failingSource) PollSource() (SourceStatus, error) {
	close(c.polling)
	<-c.release
	return NothingAvailable, errors.New("poll: boom")
}

// TestEndingTaskHearsTheAbortsBeforeIt: checkpoint aborts that reached a task before its cancellation are
// told to the operators before they close, ahead of a completion that waited too (a job that fails or is
// cancelled sends them ahead of the cancellations, so that a transactional sink can abort what it
// prepared), also when the cancellation ends the task in the middle of its work. A task that fails with
// aborts waiting tells them too; a running task tells its operators of an abort between records.
func TestEndingTaskHearsTheAbortsBeforeIt(t *testing.T) {
	mem, err := network.NewNetworkMemory(1<<20, network.DefaultBufferSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cancel bool
		chain  func(*blockedSource) Chain
		state  deploy.State
		want   []string
	}{
		{"cancelled", true, func(b *blockedSource) Chain { return cancelledSource{b} }, deploy.Canceled,
			[]string{"abort 3", "abort 5", "complete 4", "close"}},
		{"failed", false, func(b *blockedSource) Chain { return failingSource{b} }, deploy.Failed,
			[]string{"abort 3", "abort 5", "close"}},
		{"running", false, func(b *blockedSource) Chain { return b }, deploy.Finished,
			[]string{"abort 3", "abort 5", "complete 4", "close"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &blockedSource{polling: make(chan struct{}), release: make(chan struct{})}
			chain := tc.chain(src)
			cfg := Config{
				Info:  deploy.Info{JobName: "end", VertexName: "source", Parallelism: 1, MaxParallelism: 128},
				Chain: func(*Runtime) (Chain, error) { return chain, nil },
			}
			task := New(cfg, Env{Partitions: network.NewPartitionManager(), Memory: mem, Logger: slog.New(slog.DiscardHandler)})
			go task.Run()
			<-src.polling
			task.AbortCheckpoint(5)
			task.AbortCheckpoint(3)
			task.NotifyCheckpointComplete(4)
			if tc.cancel {
				task.Cancel()
			}
			close(src.release)
			select {
			case <-task.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the task did not end")
			}
			if task.State() != tc.state {
				t.Fatalf("task ended %s (%v), want %s", task.State(), task.Err(), tc.state)
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if !slices.Equal(src.heard, tc.want) {
				t.Fatalf("the operators heard %q, want %q", src.heard, tc.want)
			}
		})
	}
}
