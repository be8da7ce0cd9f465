package fraud_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/fraud"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// gated is a source of transactions the test hands over one by one.
type gated struct {
	ch    chan fraud.Transaction
	ready chan struct{}
}

func (g *gated) send(t fraud.Transaction) {
	g.ch <- t
	select {
	case g.ready <- struct{}{}:
	default:
	}
}

func (g *gated) CreateReader(runnel.RuntimeContext) (runnel.SourceReader[fraud.Transaction], error) {
	return g, nil
}

func (g *gated) PollNext(out runnel.Collector[fraud.Transaction]) (runnel.InputStatus, error) {
	select {
	case t, ok := <-g.ch:
		if !ok {
			return runnel.EndOfInput, nil
		}
		out.Collect(t)
		return runnel.MoreAvailable, nil
	default:
		return runnel.NothingAvailable, nil
	}
}
func (g *gated) Available() <-chan struct{} { return g.ready }
func (g *gated) Close() error               { return nil }

// TestFraudDetector drives the detector on a manual clock: a large transaction within the minute after a
// small one raises an alert; once the minute passed, the processing-time timer has cleared the flag; an
// ordinary transaction in between clears it too (and deletes the timer).
func TestFraudDetector(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	env := runnel.NewEnvironment(runnel.WithClock(clock))
	src := &gated{ch: make(chan fraud.Transaction, 16), ready: make(chan struct{}, 1)}
	job := fraud.New(nil)
	if err := job.BuildOn(runnel.FromSource(env, src).Name("transactions")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var res *runnel.JobResult
	go func() {
		var err error
		res, err = env.Execute(ctx, "fraud")
		done <- err
	}()
	small := func(acct, seq int64) fraud.Transaction { return fraud.Transaction{Account: acct, Cents: 50, Seq: seq} }
	large := func(acct, seq int64) fraud.Transaction {
		return fraud.Transaction{Account: acct, Cents: 90_000, Seq: seq}
	}
	timerSet := func() {
		t.Helper()
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal("the detector never set its timer:", err)
		}
	}
	// Account 1: small then large at once: an alert.
	src.send(small(1, 1))
	timerSet()
	src.send(large(1, 2))
	// Records reach the detector asynchronously: the clock must not move before this one was processed.
	for deadline := time.Now().Add(10 * time.Second); len(job.Alerts()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no alert for account 1")
		}
	}
	// Account 2: small, then the minute passes: the timer clears the flag, and the large one is fine.
	src.send(small(2, 3))
	timerSet()
	clock.Advance(61 * time.Second)
	src.send(large(2, 4))
	// Account 3: small, 30 s pass (the timer is not due), large: an alert. Its timer being set also says
	// that account 2's large transaction, before it, was processed.
	src.send(small(3, 5))
	timerSet()
	clock.Advance(30 * time.Second)
	src.send(large(3, 6))
	// Account 4: a large one alone; account 5: small, ordinary, large: no alert.
	src.send(large(4, 7))
	src.send(small(5, 8))
	src.send(fraud.Transaction{Account: 5, Cents: 2_000, Seq: 9})
	src.send(large(5, 10))
	close(src.ch)
	select {
	case src.ready <- struct{}{}:
	default:
	}
	if err := <-done; err != nil || res.Status != "FINISHED" {
		t.Fatalf("job ended %v, %+v", err, res)
	}
	want := []fraud.Alert{{Account: 1, Small: 1, Large: 2}, {Account: 3, Small: 5, Large: 6}}
	if got := job.Alerts(); !slices.Equal(got, want) {
		t.Fatalf("alerts %+v, want %+v", got, want)
	}
}

// TestFraudJob runs the bundled job on its generator over two TaskManagers: every tested card followed by
// a large transaction raises exactly one alert.
func TestFraudJob(t *testing.T) {
	const p, records, accounts, every = 2, 40_000, 100, 10
	job := fraud.New(nil)
	job.Records, job.Accounts, job.FraudEvery = records, accounts, every
	env := runnel.NewEnvironment(runnel.WithParallelism(p), runnel.WithTaskManagers(2))
	if err := job.Build(env, run.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := env.Execute(ctx, "fraud")
	if err != nil || res.Status != "FINISHED" {
		t.Fatalf("%v %+v", err, res)
	}
	// Independently: per subtask, each fraud account has records/p/accounts transactions, one alert per
	// round 1 mod 4.
	want := map[fraud.Alert]bool{}
	for s := 0; s < p; s++ {
		for seq := uint64(0); seq < records/p; seq++ {
			tx := fraud.Generate(accounts, every, s, seq)
			if tx.Cents > fraud.LargeCents {
				want[fraud.Alert{Account: tx.Account, Small: tx.Seq - accounts, Large: tx.Seq}] = true
			}
		}
	}
	got := job.Alerts()
	if len(got) != len(want) || len(want) != p*(accounts/every)*(records/p/accounts/4) {
		t.Fatalf("%d alerts, want %d", len(got), len(want))
	}
	for _, a := range got {
		if !want[a] {
			t.Fatalf("unexpected alert %+v", a)
		}
	}
}
