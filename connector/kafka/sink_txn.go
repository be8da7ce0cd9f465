package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// The exactly-once sink is a two-phase commit over Kafka transactions, as Flink's KafkaSink.
//
// Each subtask owns a pool of transactional producers, ids PREFIX-SUBTASK-K for K = 0, 1, ...; the pool
// grows when every producer holds a transaction (one being written, the others prepared and waiting for
// their checkpoint to complete), which takes two in steady state. The records of one checkpoint epoch
// go into one transaction, begun at the epoch's first record. At the barrier the producer is flushed and
// its transaction left open (prepared): its transactional id, producer id and epoch go into the
// checkpoint's state. When a checkpoint completes, every transaction prepared up to it commits and its
// producer goes back to the pool.
//
// A transaction is known by its transactional id, producer id and epoch, and a commit sent with them
// commits that very transaction or nothing: under transaction.version 2 (KIP-890) every transaction ends
// with an epoch bump, and below it the pool replaces a producer after each commit (a new client's
// InitProducerId bumps the epoch), so that no later transaction of the id carries the epoch of one a
// checkpoint lists.
//
// A restore commits the transactions its checkpoint lists (EndTxn with the stored identity, to the
// transaction coordinator; an answer that the transaction is no longer open under that identity means it
// was committed before: its notification came before the failure), then aborts every other open
// transaction of the subtask: the pool's ids the state names are initialized again (InitProducerId
// aborts what was open and fences the previous attempt), and ListTransactions finds any other open one
// under the prefix. Subtask i also aborts those of subtasks numbered at or above the parallelism whose
// number is i modulo the parallelism (a previous run with more subtasks). A subtask that starts without
// state (a fresh job, or a failover before the first checkpoint) does the same with no commit.
//
// A checkpoint abort (runnel.CheckpointAbortListener) leaves the transaction prepared for it open while
// the subtask runs: the next checkpoint lists it too (its records come before that barrier), and that
// checkpoint's completion commits it. Close aborts the open transaction and every prepared one that no
// checkpoint which may still complete lists: prepared for a checkpoint that, with every later one the
// subtask snapshotted, was heard aborted. The job master aborts a failing or cancelled job's checkpoints
// ahead of the cancellations (and holds the cancellations while a commit is out), so a sink subtask that
// is cancelled leaves nothing open. A sink subtask that fails itself cannot do as much: a checkpoint it
// acknowledged may still complete, and it is gone before its fate is decided. A restore settles what it
// prepared; when none follows (the job failed for good, or was cancelled before the restart), the engine
// calls the sink's Settle once the job's tasks stopped, which does what a restore from the job's restore
// point would (runnel.Settler, docs/checkpoints.md).

// maxPool bounds a subtask's transactional producers: more mean that checkpoints stopped completing,
// while transactions waited for them.
const maxPool = 64

// txnProducer is one transactional producer of the pool.
type txnProducer struct {
	k     int
	id    string
	cl    *kgo.Client // nil once replaced (transaction.version below 2), made again when taken
	pid   int64       // the identity of the prepared transaction
	epoch int16
	begun time.Time // when its transaction began (our clock)
}

// prepared is a transaction prepared for a checkpoint.
type prepared struct {
	checkpoint int64
	p          *txnProducer
}

type txnWriter struct {
	cfg      *SinkConfig
	sub, par int
	log      *slog.Logger
	timeout  time.Duration
	opts     func() []kgo.Opt
	base     context.Context // what every request's context derives from: nil for a writer, Settle's for Settle

	pool    map[int]*txnProducer // every producer made, by K
	free    []*txnProducer       // producers without a transaction
	cur     *txnProducer         // the transaction being written, nil until the epoch's first record
	pending []prepared           // prepared transactions, by checkpoint
	started bool                 // the open transactions of earlier attempts were settled

	// What the subtask heard of its checkpoints' fate, for close (see undecidedAbove): completed is the
	// highest completion heard; undecided the checkpoints snapshotted above it whose abort was not heard,
	// ascending, at most maxUndecided; undecidedFloor the highest of those dropped past that bound.
	completed      int64
	undecided      []int64
	undecidedFloor int64
}

// maxUndecided bounds the checkpoints a subtask snapshotted and heard neither completed nor aborted.
// Past it the oldest is folded into undecidedFloor, which only keeps more transactions open at close.
const maxUndecided = 2 * maxPool

func (t *txnWriter) txnID(prefix string, sub, k int) string {
	return prefix + "-" + strconv.Itoa(sub) + "-" + strconv.Itoa(k)
}

func (t *txnWriter) ctx() (context.Context, context.CancelFunc) {
	base := t.base
	if base == nil {
		base = context.Background()
	}
	return context.WithTimeout(base, t.timeout)
}

// newClient makes the transactional producer of id and initializes it: InitProducerId fences every
// earlier producer of id and aborts the transaction it left open.
func (t *txnWriter) newClient(id string) (*kgo.Client, error) {
	opts := append(t.opts(), kgo.TransactionalID(id), kgo.TransactionTimeout(t.cfg.txnTimeout()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	ctx, cancel := t.ctx()
	defer cancel()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		if errors.Is(err, kerr.InvalidTransactionTimeout) {
			return nil, fmt.Errorf("kafka sink: transactional id %s: the broker refuses the transaction timeout %s: it is above the broker's transaction.max.timeout.ms (15 minutes by default); lower SinkConfig.TransactionTimeout or raise that setting: %w", id, t.cfg.txnTimeout(), err)
		}
		return nil, fmt.Errorf("kafka sink: initialize transactional id %s: %w", id, err)
	}
	return cl, nil
}

// producer returns the pool's producer k, made (and initialized) if need be.
func (t *txnWriter) producer(k int) (*txnProducer, error) {
	p := t.pool[k]
	if p == nil {
		p = &txnProducer{k: k, id: t.txnID(t.cfg.TransactionalIDPrefix, t.sub, k)}
	}
	if p.cl == nil {
		cl, err := t.newClient(p.id)
		if err != nil {
			return nil, err
		}
		p.cl = cl
	}
	t.pool[k] = p
	return p, nil
}

// current returns the client of the epoch's transaction, beginning one with a free producer (the lowest
// K, to keep the pool small) at the epoch's first record.
func (t *txnWriter) current() (*kgo.Client, error) {
	if t.cur != nil {
		return t.cur.cl, nil
	}
	if err := t.start(nil); err != nil {
		return nil, err
	}
	var p *txnProducer
	if len(t.free) > 0 {
		sort.Slice(t.free, func(i, j int) bool { return t.free[i].k < t.free[j].k })
		p, t.free = t.free[0], t.free[1:]
	} else {
		k := len(t.pool)
		if k >= maxPool {
			return nil, fmt.Errorf("kafka sink: %d transactions of subtask %d wait for checkpoints to complete; checkpoints keep failing", len(t.pending), t.sub)
		}
		p = &txnProducer{k: k}
	}
	p, err := t.producer(p.k)
	if err != nil {
		return nil, err
	}
	if err := p.cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("kafka sink: begin a transaction with %s: %w", p.id, err)
	}
	p.begun = time.Now()
	t.cur = p
	return p.cl, nil
}

// txnStateVersion starts the checkpointed state of the exactly-once sink.
const txnStateVersion = 1

// snapshot prepares the epoch's transaction (its records are flushed already) for checkpoint id and
// returns the state: the prefix, the parallelism, the pool's size and the prepared transactions.
func (t *txnWriter) snapshot(id int64) ([]byte, error) {
	if p := t.cur; p != nil {
		ctx, cancel := t.ctx()
		pid, epoch, err := p.cl.ProducerID(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("kafka sink: prepare the transaction of %s: %w", p.id, err)
		}
		p.pid, p.epoch = pid, epoch
		t.pending = append(t.pending, prepared{checkpoint: id, p: p})
		t.cur = nil
	}
	if id > t.completed && (len(t.undecided) == 0 || id > t.undecided[len(t.undecided)-1]) {
		t.undecided = append(t.undecided, id)
		if len(t.undecided) > maxUndecided {
			t.undecidedFloor = max(t.undecidedFloor, t.undecided[0])
			t.undecided = slices.Delete(t.undecided, 0, 1)
		}
	}
	b := []byte{txnStateVersion}
	b = binary.AppendUvarint(b, uint64(len(t.cfg.TransactionalIDPrefix)))
	b = append(b, t.cfg.TransactionalIDPrefix...)
	b = binary.AppendUvarint(b, uint64(t.par))
	b = binary.AppendUvarint(b, uint64(len(t.pool)))
	b = binary.AppendUvarint(b, uint64(len(t.pending)))
	for _, pr := range t.pending {
		b = binary.AppendVarint(b, pr.checkpoint)
		b = binary.AppendUvarint(b, uint64(pr.p.k))
		b = binary.AppendVarint(b, pr.p.pid)
		b = binary.AppendVarint(b, int64(pr.p.epoch))
		b = binary.AppendVarint(b, pr.p.begun.UnixMilli())
	}
	return b, nil
}

// commitUpTo commits the transactions prepared for checkpoints up to id, in order, and returns their
// producers to the pool.
func (t *txnWriter) commitUpTo(id int64) error {
	// Heard before the commits: one that fails leaves its transaction to the restore of the checkpoint,
	// and close must not abort it.
	t.completed = max(t.completed, id)
	t.undecided = slices.DeleteFunc(t.undecided, func(c int64) bool { return c <= id })
	if t.undecidedFloor <= id {
		t.undecidedFloor = 0
	}
	n := 0
	for n < len(t.pending) && t.pending[n].checkpoint <= id {
		p := t.pending[n].p
		ctx, cancel := t.ctx()
		err := p.cl.EndTransaction(ctx, kgo.TryCommit)
		cancel()
		if err != nil {
			t.pending = t.pending[n:]
			return fmt.Errorf("kafka sink: commit transaction %s (producer id %d, epoch %d) of checkpoint %d: %w", p.id, p.pid, p.epoch, t.pending[0].checkpoint, err)
		}
		// Below transaction.version 2 the next transaction would carry this one's epoch, and a restore
		// that commits this one again would commit it: the producer is made again, with a new epoch.
		ctx, cancel = t.ctx()
		pid, epoch, err := p.cl.ProducerID(ctx)
		cancel()
		if err != nil || (pid == p.pid && epoch == p.epoch) {
			p.cl.Close()
			p.cl = nil
		}
		t.free = append(t.free, p)
		n++
	}
	t.pending = t.pending[n:]
	return nil
}

// aborted hears that checkpoint id was aborted: it can never complete, and no restore takes it. The
// transaction prepared for it stays: the subtask goes on, and its next checkpoint lists that transaction
// too (what it holds comes before that checkpoint's barrier), so the next completion commits it. Only
// close, when no later checkpoint can come, aborts it (undecidedAbove).
func (t *txnWriter) aborted(id int64) {
	if i, found := slices.BinarySearch(t.undecided, id); found {
		t.undecided = slices.Delete(t.undecided, i, i+1)
	}
}

// undecidedAbove returns the highest checkpoint this subtask snapshotted that may still complete or be
// restored from: the highest completion heard, or a snapshot above it whose abort was not heard. Every
// snapshot lists each transaction prepared before it, so a prepared transaction above that checkpoint
// is listed only by checkpoints that were aborted; once the subtask closes, taking no later snapshot,
// no checkpoint that lists it can complete.
func (t *txnWriter) undecidedAbove() int64 {
	keep := max(t.completed, t.undecidedFloor)
	if n := len(t.undecided); n > 0 {
		keep = max(keep, t.undecided[n-1])
	}
	return keep
}

// close aborts the open transaction and the prepared ones that no checkpoint which may complete lists
// (their checkpoints, and every later one the subtask snapshotted, were heard aborted: see
// undecidedAbove), and closes the producers. The other prepared transactions stay open: their checkpoint
// may have completed (its notification was missed), and then the restore of the job, or the settling of
// a job that ended (sink.Settle), commits them; if not, either aborts them.
func (t *txnWriter) close() error {
	var err error
	if p := t.cur; p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), min(t.timeout, 10*time.Second))
		if err = p.cl.AbortBufferedRecords(ctx); err == nil {
			err = p.cl.EndTransaction(ctx, kgo.TryAbort)
		}
		cancel()
		if err != nil {
			err = fmt.Errorf("kafka sink: abort the open transaction of %s: %w", p.id, err)
		}
		t.cur = nil
	}
	keep := t.undecidedAbove()
	for len(t.pending) > 0 {
		pr := t.pending[len(t.pending)-1]
		if pr.checkpoint <= keep {
			break
		}
		p := pr.p
		ctx, cancel := context.WithTimeout(context.Background(), min(t.timeout, 10*time.Second))
		aerr := p.cl.EndTransaction(ctx, kgo.TryAbort)
		cancel()
		if aerr != nil {
			err = errors.Join(err, fmt.Errorf("kafka sink: abort transaction %s (producer id %d, epoch %d) of aborted checkpoint %d: %w", p.id, p.pid, p.epoch, pr.checkpoint, aerr))
			break
		}
		t.log.Info("kafka sink: aborted the transaction prepared for an aborted checkpoint", "transactional_id", p.id,
			"producer_id", p.pid, "epoch", p.epoch, "checkpoint", pr.checkpoint)
		t.pending = t.pending[:len(t.pending)-1]
	}
	for _, p := range t.pool {
		if p.cl != nil {
			p.cl.Close()
			p.cl = nil
		}
	}
	return err
}

// restored is what the checkpointed state lists.
type restoredState struct {
	prefix   string
	par      int
	poolSize int
	pending  []restoredTxn
}

type restoredTxn struct {
	checkpoint int64
	k          int
	pid        int64
	epoch      int16
	begun      time.Time
}

func decodeTxnState(b []byte) (restoredState, error) {
	bad := errors.New("kafka sink: malformed checkpointed state")
	var st restoredState
	if len(b) == 0 || b[0] != txnStateVersion {
		return st, fmt.Errorf("%w: not the state of an exactly-once sink (version byte %v); was the delivery guarantee changed?", bad, b[:min(len(b), 1)])
	}
	b = b[1:]
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	vi := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	n := uv()
	if n > uint64(len(b)) {
		return st, bad
	}
	st.prefix, b = string(b[:n]), b[n:]
	st.par, st.poolSize = int(uv()), int(uv())
	np := uv()
	if b == nil || np > uint64(len(b)) || st.poolSize > maxPool {
		return st, bad
	}
	for range np {
		r := restoredTxn{checkpoint: vi(), k: int(uv()), pid: vi(), epoch: int16(vi())}
		r.begun = time.UnixMilli(vi())
		st.pending = append(st.pending, r)
	}
	if b == nil || len(b) != 0 {
		return st, bad
	}
	return st, nil
}

// restore commits what the restored checkpoint lists and aborts the rest (see the top of the file).
func (t *txnWriter) restore(b []byte) error {
	st, err := decodeTxnState(b)
	if err != nil {
		return err
	}
	return t.start(&st)
}

// start settles what earlier attempts and runs left open, once, before the first transaction: st is the
// restored state, or nil for a subtask that starts without one.
func (t *txnWriter) start(st *restoredState) error {
	if t.started {
		return nil
	}
	t.started = true
	if st == nil {
		st = &restoredState{prefix: t.cfg.TransactionalIDPrefix, par: t.par}
	}
	if len(st.pending) > 0 {
		adm, err := t.adminClient()
		if err != nil {
			return err
		}
		defer adm.Close()
		for _, r := range st.pending {
			if err := t.commitRestored(adm, t.txnID(st.prefix, t.sub, r.k), r); err != nil {
				return err
			}
		}
	}
	// The pool's ids: initializing them aborts what was open. Under another prefix they are only aborted.
	for k := range st.poolSize {
		if st.prefix == t.cfg.TransactionalIDPrefix {
			if _, err := t.producer(k); err != nil {
				return err
			}
			continue
		}
		if err := t.abortID(t.txnID(st.prefix, t.sub, k)); err != nil {
			return err
		}
	}
	for _, p := range t.pool {
		t.free = append(t.free, p)
	}
	return t.abortListed(st.prefix)
}

// adminClient is a client without a transactional id, for requests about transactions; below
// transaction.version 2 it sends EndTxn at version 4 as the producers did.
func (t *txnWriter) adminClient() (*kgo.Client, error) {
	cl, err := kgo.NewClient(t.opts()...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	ctx, cancel := t.ctx()
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka sink: ask %v for its versions: %w", t.cfg.Brokers, err)
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 {
			return cl, nil
		}
	}
	cl.Close()
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.EndTxn), 4)
	cl, err = kgo.NewClient(append(t.opts(), kgo.MaxVersions(v))...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	return cl, nil
}

// commitRestored commits a transaction the restored checkpoint lists, with the identity it was prepared
// under. The broker's answers that no transaction is open under that identity (it is complete, or the
// producer's epoch moved on) mean it was committed before: its checkpoint completed and was notified
// before the failure, so that a second commit is harmless.
func (t *txnWriter) commitRestored(adm *kgo.Client, id string, r restoredTxn) error {
	ctx, cancel := t.ctx()
	defer cancel()
	for {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, r.pid, r.epoch, true
		resp, err := req.RequestWith(ctx, adm)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		switch {
		case err == nil:
			t.log.Info("kafka sink: committed the transaction of the restored checkpoint (a broker answers a repeated commit as a success too)", "transactional_id", id,
				"producer_id", r.pid, "epoch", r.epoch, "checkpoint", r.checkpoint)
			return nil
		case alreadyEnded(err):
			age := time.Since(r.begun)
			if age < t.cfg.txnTimeout() {
				t.log.Info("kafka sink: the transaction of the restored checkpoint was committed before", "transactional_id", id,
					"producer_id", r.pid, "epoch", r.epoch, "checkpoint", r.checkpoint, "answer", err.Error())
			} else {
				t.log.Warn("kafka sink: the transaction of the restored checkpoint is no longer open; it began longer ago than the transaction timeout, so Kafka may have aborted it and its records may be lost (raise SinkConfig.TransactionTimeout)",
					"transactional_id", id, "producer_id", r.pid, "epoch", r.epoch, "checkpoint", r.checkpoint, "age", age.Round(time.Second), "answer", err.Error())
			}
			return nil
		case isRetriable(err) && ctx.Err() == nil:
			time.Sleep(20 * time.Millisecond) // as kgo backs off from CONCURRENT_TRANSACTIONS
		default:
			return fmt.Errorf("kafka sink: commit transaction %s (producer id %d, epoch %d) of restored checkpoint %d: %w", id, r.pid, r.epoch, r.checkpoint, err)
		}
	}
}

// alreadyEnded reports the answers to a commit whose transaction is not open under its identity.
func alreadyEnded(err error) bool {
	return errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.TransactionalIDNotFound)
}

func isRetriable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, kerr.ConcurrentTransactions) {
		return true // the coordinator still writes the markers of the transaction's last end: ask again
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable
	}
	return true // a connection's error: the request is sent again
}

// abortID aborts what is open under a transactional id, by initializing a producer of it.
func (t *txnWriter) abortID(id string) error {
	cl, err := t.newClient(id)
	if err != nil {
		return err
	}
	cl.Close()
	t.log.Info("kafka sink: aborted what was open under a transactional id", "transactional_id", id)
	return nil
}

// abortListed aborts the open transactions that ListTransactions finds under the prefixes, that belong
// to this subtask and are not its pool's (those were settled by initializing them), or to a subtask at or
// above the parallelism whose number is this one's modulo the parallelism. Where the broker cannot list
// transactions (before Kafka 3.0, or without DESCRIBE on the ids), it logs why and leaves them to their
// timeout.
func (t *txnWriter) abortListed(prefixes ...string) error {
	adm, err := kgo.NewClient(t.opts()...)
	if err != nil {
		return fmt.Errorf("kafka sink: %w", err)
	}
	defer adm.Close()
	ctx, cancel := t.ctx()
	defer cancel()
	req := kmsg.NewPtrListTransactionsRequest()
	req.StateFilters = []string{"Ongoing"}
	var ids []string
	for _, shard := range adm.RequestSharded(ctx, req) {
		err := shard.Err
		if err == nil {
			err = kerr.ErrorForCode(shard.Resp.(*kmsg.ListTransactionsResponse).ErrorCode)
		}
		if err != nil {
			t.log.Warn("kafka sink: cannot list the open transactions, to abort those an earlier run left; they end at their timeout",
				"broker", shard.Meta.NodeID, "err", err)
			continue
		}
		for _, s := range shard.Resp.(*kmsg.ListTransactionsResponse).TransactionStates {
			ids = append(ids, s.TransactionalID)
		}
	}
	prefixes = append(prefixes, t.cfg.TransactionalIDPrefix)
	for _, id := range ids {
		sub, k, ok := parseTxnID(id, prefixes)
		if !ok {
			continue
		}
		mine := sub == t.sub && (t.pool[k] == nil || !strings.HasPrefix(id, t.cfg.TransactionalIDPrefix+"-"))
		beyond := sub >= t.par && sub%t.par == t.sub
		if !mine && !beyond {
			continue
		}
		if err := t.abortID(id); err != nil {
			return err
		}
	}
	return nil
}

// parseTxnID splits PREFIX-SUBTASK-K for one of the prefixes.
func parseTxnID(id string, prefixes []string) (sub, k int, ok bool) {
	for _, p := range prefixes {
		rest, found := strings.CutPrefix(id, p+"-")
		if !found {
			continue
		}
		s, kk, found := strings.Cut(rest, "-")
		if !found {
			continue
		}
		var err1, err2 error
		sub, err1 = strconv.Atoi(s)
		k, err2 = strconv.Atoi(kk)
		if err1 == nil && err2 == nil && sub >= 0 && k >= 0 {
			return sub, k, true
		}
	}
	return 0, 0, false
}
