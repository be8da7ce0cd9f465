package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

// TestBroker runs one real broker through what the end-to-end tests rely on: topics with several
// partitions, plain records, transactions committed and aborted as a read_committed and a read_uncommitted
// reader see them, the listing of Ongoing transactions, and a Stop that leaves no process and no directory.
func TestBroker(t *testing.T) {
	began := time.Now()
	b := Start(t)
	t.Logf("Apache Kafka %s at %s, answering after %v", Version, b.Addr, time.Since(began).Round(time.Millisecond))

	t.Run("produce and consume", func(t *testing.T) {
		b.CreateTopic(t, "plain", 3)
		p := b.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var want []string
		for i := range 9 {
			v := fmt.Sprintf("v%d", i)
			want = append(want, v)
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: "plain", Partition: int32(i % 3), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("producing %s: %v", v, err)
			}
		}
		got := consumeAll(t, b, "plain", len(want), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
		if !slices.Equal(sorted(got), sorted(want)) {
			t.Fatalf("consumed %v, want %v", got, want)
		}
		md, err := b.Admin(t).Metadata(ctx, "plain")
		if err != nil {
			t.Fatal(err)
		}
		if n := len(md.Topics["plain"].Partitions); n != 3 {
			t.Fatalf("topic plain has %d partitions, want 3", n)
		}
	})

	t.Run("transactions", func(t *testing.T) {
		b.CreateTopic(t, "txn", 2)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		p := b.Client(t, kgo.TransactionalID("harness-txn"), kgo.DefaultProduceTopic("txn"),
			kgo.TransactionTimeout(time.Minute))
		write := func(commit bool, vals ...string) {
			t.Helper()
			if err := p.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if err := p.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatalf("producing %s: %v", v, err)
				}
			}
			if !commit {
				// While open, the transaction is listed as Ongoing: what the end-to-end tests check is absent
				// after a job ends.
				ongoing := b.OngoingTransactions(t, "harness-")
				if len(ongoing) != 1 || ongoing[0].TxnID != "harness-txn" {
					t.Fatalf("ongoing transactions while one is open: %+v, want harness-txn alone", ongoing)
				}
			}
			if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatalf("ending the transaction (commit %v): %v", commit, err)
			}
		}
		write(true, "c1", "c2")
		write(false, "a1", "a2")
		write(true, "c3", "c4")

		if ongoing := b.OngoingTransactions(t, ""); len(ongoing) != 0 {
			t.Fatalf("ongoing transactions after all ended: %+v", ongoing)
		}
		// The read_committed reader sees the committed records only, and the read_uncommitted one sees the
		// aborted ones too: the broker really aborted them rather than never receiving them.
		committed := consumeAll(t, b, "txn", 4)
		if want := []string{"c1", "c2", "c3", "c4"}; !slices.Equal(sorted(committed), want) {
			t.Fatalf("read_committed read %v, want %v", committed, want)
		}
		all := consumeAll(t, b, "txn", 6, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
		if want := []string{"a1", "a2", "c1", "c2", "c3", "c4"}; !slices.Equal(sorted(all), want) {
			t.Fatalf("read_uncommitted read %v, want %v", all, want)
		}
	})

	t.Run("stop", func(t *testing.T) {
		pid := b.pid
		if !b.Running() {
			t.Fatal("the broker is not running before Stop")
		}
		if err := b.Stop(); err != nil {
			t.Fatal(err)
		}
		// Reaped by Stop: the pid names no process (nor a zombie) any more.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("the broker's process %d is still there after Stop (kill -0: %v)", pid, err)
		}
		if _, err := os.Stat(b.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the broker's directory %s is still there after Stop (%v)", b.Dir, err)
		}
		if err := b.Stop(); err != nil {
			t.Fatalf("a second Stop: %v", err)
		}
	})
}

// consumeAll reads n records of topic from the start, with read_committed isolation unless opts say
// otherwise, and fails the test when they do not come within 30 s. Records past n are not waited for; the
// tests ask for exactly as many as the topic holds and compare the values.
func consumeAll(t *testing.T, b *Broker, topic string, n int, opts ...kgo.Opt) []string {
	t.Helper()
	opts = append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)
	c := b.Client(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records of %s before timing out: %v", len(got), n, topic, got)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	// One more short poll: a record beyond n would mean a duplicate or an aborted record let through.
	short, cancelShort := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelShort()
	c.PollFetches(short).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	return got
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestUnavailable checks that without the jars the start is refused as unavailable (a skip), naming what
// to run.
func TestUnavailable(t *testing.T) {
	t.Setenv(EnvHome, t.TempDir())
	_, err := start()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("start without jars: %v, want ErrUnavailable", err)
	}
	want := "internal/kafkabroker/cmd/fetch"
	if _, jerr := findJava(); jerr != nil {
		want = "java"
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not say what to do (%q): %v", want, err)
	}
}

// TestShared checks that the shared broker is one broker per test binary, that it keeps no goroutine (so a
// package's goleak.VerifyTestMain passes while it runs), and that StopShared stops it.
func TestShared(t *testing.T) {
	b := Shared(t)
	if again := Shared(t); again != b {
		t.Fatalf("a second Shared started another broker: %s and %s", b.Addr, again.Addr)
	}
	goleak.VerifyNone(t)
	pid := b.pid
	if err := StopShared(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the shared broker's process %d is still there after StopShared (kill -0: %v)", pid, err)
	}
}
