package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/runnel-dev/runnel"
)

// tp is a topic partition.
type tp struct {
	topic string
	part  int32
}

func (p tp) String() string { return fmt.Sprintf("%s[%d]", p.topic, p.part) }

// sortPartOffsets sorts offsets state elements by topic, then partition.
func sortPartOffsets(ps []partOffset) {
	slices.SortFunc(ps, func(a, b partOffset) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
}

// sortTPs sorts partitions by topic, then partition, so that what is derived from a set of them (split
// ids, snapshots) does not depend on map order.
func sortTPs(ps []tp) {
	slices.SortFunc(ps, func(a, b tp) int {
		if c := strings.Compare(a.topic, b.topic); c != 0 {
			return c
		}
		return int(a.part - b.part)
	})
}

// pollBatch bounds the records one fetch hands over, and so one PollNext.
const pollBatch = 1000

// startTimeout bounds the requests a subtask makes before it reads (metadata, start offsets).
const startTimeout = 30 * time.Second

// commitTimeout bounds one commit of offsets to the group.
const commitTimeout = 10 * time.Second

// maxPendingCommits bounds the snapshots a source with a group remembers until their checkpoint completes
// (a checkpoint that never completes is forgotten when this many newer ones wait).
const maxPendingCommits = 32

type sourceReader[T any] struct {
	src   *source[T]
	ctx   runnel.RuntimeContext
	state runnel.OperatorListState[partOffset]
	// stops is the union list state of a bounded source's stopping offsets (nil when unbounded), and
	// restoredEnd what it restored.
	stops       runnel.OperatorListState[partOffset]
	restoredEnd map[tp]int64
	// restored holds the offsets of the restored checkpoint (after a rescale: every old subtask's), and
	// wasStarted says the job started before (the state came from a checkpoint).
	restored     map[tp]int64
	wasStarted   bool
	tookRestored bool
	// oldRule says the restored checkpoint is of the source's older format, whose subtasks read partition
	// p at subtask p mod P: this run keeps that assignment, which its offsets are split by (its own
	// checkpoints are union list state, and a restore of them uses owner).
	oldRule bool

	started bool
	cl      *kgo.Client
	stop    context.CancelFunc // stops the fetch and discovery goroutines
	closing chan struct{}      // closed at Close: the committer commits what is pending and ends
	wg      sync.WaitGroup

	// offsets holds, per assigned partition, the offset of the next record to emit.
	offsets map[tp]int64
	// splits holds the split id (runnel.SplitOutput) of each assigned partition.
	splits map[tp]int
	// announced says the partitions were announced to a SplitOutput (a stream with event time).
	announced bool
	// end holds, for a bounded source, the stopping offset of each assigned partition.
	end map[tp]int64
	// done holds the partitions of a bounded source that reached their stopping offset.
	done map[tp]bool
	// pending holds the offsets of snapshots whose checkpoint has not completed yet, oldest first (only
	// with a group to commit to).
	pending []pendingCommit
	// commitFailures counts the commits to the group that failed (the committer's goroutine adds).
	commitFailures atomic.Int64

	mu      sync.Mutex
	fetched []fetched     // batches the fetch goroutine handed over, oldest first
	added   []partOffset  // partitions discovery assigned since the last poll, with their start offsets
	err     error         // the fetch goroutine's failure
	commit  kadm.Offsets  // the newest completed checkpoint's offsets, not committed yet
	ready   chan struct{} // signalled when a batch, a partition or an error arrives
	taken   chan struct{} // signalled when the task takes a whole batch out of fetched
	commitC chan struct{} // signalled when commit is set
}

// fetched is what one poll of the fetch goroutine hands over: records, and the partitions of a bounded
// source whose fetch position reached their stopping offset after them (probeEnd).
type fetched struct {
	recs    []*kgo.Record
	reached []tp
}

type pendingCommit struct {
	id      int64
	offsets kadm.Offsets
}

// clientOpts are the options of the subtask's client: the source's, then the user's.
func (r *sourceReader[T]) clientOpts() []kgo.Opt {
	cfg := &r.src.cfg
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.FetchMaxWait(100 * time.Millisecond),
		// Control records (transaction markers) come through so that a partition's position moves past
		// them: a bounded source whose end offset is right after a marker knows it reached the end.
		kgo.KeepControlRecords()}
	if !cfg.ReadUncommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	return append(opts, cfg.ClientOptions...)
}

// isolation is the ListOffsets isolation level that matches the fetches: the end of a read_committed
// partition is its last stable offset.
func (r *sourceReader[T]) isolation() int8 {
	if r.src.cfg.ReadUncommitted {
		return 0
	}
	return 1
}

// start connects, finds this subtask's partitions, decides where each starts and starts fetching.
func (r *sourceReader[T]) start() error {
	r.started = true
	cfg := &r.src.cfg
	r.takeRestored()
	cl, err := kgo.NewClient(r.clientOpts()...)
	if err != nil {
		return fmt.Errorf("kafka source: %w", err)
	}
	r.cl = cl
	ctx, cancel := r.requestContext(startTimeout)
	defer cancel()
	found, err := findPartitions(ctx, cl, cfg, true)
	if err != nil {
		return err
	}
	if err := checkNamed(cfg, found, !r.wasStarted); err != nil {
		return err
	}
	mine := r.assigned(found)
	var fresh []tp
	for _, p := range mine {
		if off, ok := r.restored[p]; ok {
			r.offsets[p] = off
		} else {
			fresh = append(fresh, p)
		}
	}
	for p := range r.restored {
		if r.mine(p) && !slices.Contains(mine, p) {
			r.ctx.Logger().Warn("kafka source: the checkpoint has an offset for a partition that is no longer read (its topic is gone or no longer subscribed)",
				"partition", p.String(), "offset", r.restored[p])
		}
	}
	// A job that started before reads partitions its checkpoint does not list from their start: they
	// appeared after it (or after the last checkpoint).
	from := cfg.StartAt
	if r.wasStarted {
		from = Earliest
	}
	starts, err := r.startOffsets(ctx, fresh, from)
	if err != nil {
		return err
	}
	for p, off := range starts {
		r.offsets[p] = off
	}
	var pr *prober
	if cfg.Bounded {
		if r.end, err = r.stopOffsets(ctx, mine); err != nil {
			return err
		}
		r.done = map[tp]bool{}
		pr = newProber(r.end)
		for _, p := range mine {
			pr.pos[p] = r.offsets[p]
			if r.offsets[p] >= r.end[p] {
				r.done[p] = true // nothing to read: its split is never announced, nor released
			}
		}
	}
	var fetch []tp // a bounded partition that starts at its stopping offset is not fetched at all
	for _, p := range mine {
		r.splitID(p)
		if !r.done[p] {
			fetch = append(fetch, p)
		}
	}
	r.consume(fetch)
	fctx, stop := context.WithCancel(context.Background())
	r.stop, r.closing, r.commitC = stop, make(chan struct{}), make(chan struct{}, 1)
	r.wg.Add(1)
	go r.fetch(fctx, pr)
	if every := cfg.discoveryInterval(); every > 0 {
		known := map[tp]bool{}
		for _, ps := range found {
			for _, p := range ps {
				known[p] = true
			}
		}
		r.wg.Add(1)
		go r.discover(fctx, every, known)
	}
	if cfg.Group != "" {
		r.wg.Add(1)
		go r.committer()
	}
	return nil
}

// checkNamed checks that StopOffsets, and StartOffsets when the job starts at them (fresh: it starts
// without a checkpoint), name only partitions of the source's topics (found).
func checkNamed(cfg *SourceConfig, found map[string][]tp, fresh bool) error {
	var errs []error
	check := func(name string, offs map[TopicPartition]int64) {
		var ps []tp
		for p := range offs {
			ps = append(ps, tp{p.Topic, p.Partition})
		}
		sortTPs(ps)
		for _, p := range ps {
			parts, ok := found[p.topic]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("kafka source: %s names partition %s, but the source does not read topic %q (it reads %s)",
					name, p, p.topic, topicNames(found)))
			case !slices.Contains(parts, p):
				errs = append(errs, fmt.Errorf("kafka source: %s names partition %s, but topic %q has %d partitions (0 to %d)",
					name, p, p.topic, len(parts), len(parts)-1))
			}
		}
	}
	if cfg.StartAt == Offsets && fresh {
		check("StartOffsets", cfg.StartOffsets)
	}
	if cfg.StopAt == StopOffsets {
		check("StopOffsets", cfg.StopOffsets)
	}
	return errors.Join(errs...)
}

// topicNames lists the topics of found, sorted and quoted.
func topicNames(found map[string][]tp) string {
	var ts []string
	for t := range found {
		ts = append(ts, fmt.Sprintf("%q", t))
	}
	slices.Sort(ts)
	if len(ts) == 0 {
		return "no topic"
	}
	return strings.Join(ts, ", ")
}

// stopOffsets returns the stopping offset of each of ps: the restored one, or by cfg.StopAt.
func (r *sourceReader[T]) stopOffsets(ctx context.Context, mine []tp) (map[tp]int64, error) {
	cfg := &r.src.cfg
	var ps []tp
	for _, p := range mine {
		if _, ok := r.restoredEnd[p]; !ok {
			ps = append(ps, p)
		}
	}
	latest, err := listOffsets(ctx, r.cl, ps, -1, r.isolation())
	if err != nil {
		return nil, err
	}
	for _, p := range mine {
		if end, ok := r.restoredEnd[p]; ok {
			latest[p] = end // StopAt below works out those of ps only
		}
	}
	switch cfg.StopAt {
	case StopTimestamp:
		at, err := listOffsets(ctx, r.cl, ps, cfg.StopTimestamp.UnixMilli(), r.isolation())
		if err != nil {
			return nil, err
		}
		for p, off := range at {
			// No record at or after the time (-1), or the first one beyond what read_committed may read yet.
			if off >= 0 && off < latest[p] {
				latest[p] = off
			}
		}
	case StopOffsets:
		for _, p := range ps {
			if off, ok := cfg.StopOffsets[TopicPartition{p.topic, p.part}]; ok {
				latest[p] = off
			}
		}
	}
	return latest, nil
}

// takeRestored reads the restored offsets state (it is restored after CreateReader) into restored, once.
func (r *sourceReader[T]) takeRestored() {
	if r.tookRestored {
		return
	}
	r.tookRestored = true
	for _, po := range r.state.Get() {
		r.wasStarted = true
		p := tp{po.Topic, po.Partition}
		if _, dup := r.restored[p]; !dup && po.Partition >= 0 {
			r.restored[p] = po.Offset
		}
	}
	if r.stops != nil {
		for _, po := range r.stops.Get() {
			r.restoredEnd[tp{po.Topic, po.Partition}] = po.Offset
		}
	}
}

// requestContext is a context for requests of the task goroutine: it ends after d or when the task is
// cancelled.
func (r *sourceReader[T]) requestContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-r.ctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// mine reports whether this subtask reads partition p.
func (r *sourceReader[T]) mine(p tp) bool {
	if r.oldRule {
		return int(p.part)%r.ctx.Parallelism() == r.ctx.SubtaskIndex()
	}
	return owner(p, r.ctx.Parallelism()) == r.ctx.SubtaskIndex()
}

// assigned returns this subtask's share of the partitions found, sorted.
func (r *sourceReader[T]) assigned(found map[string][]tp) []tp {
	var mine []tp
	for _, ps := range found {
		for _, p := range ps {
			if r.mine(p) {
				mine = append(mine, p)
			}
		}
	}
	sortTPs(mine)
	return mine
}

// consume makes the client fetch the partitions from their offsets.
func (r *sourceReader[T]) consume(ps []tp) {
	m := map[string]map[int32]kgo.Offset{}
	for _, p := range ps {
		if m[p.topic] == nil {
			m[p.topic] = map[int32]kgo.Offset{}
		}
		m[p.topic][p.part] = kgo.NewOffset().At(r.offsets[p])
	}
	r.cl.AddConsumePartitions(m)
}

// startOffsets returns where each of ps starts without a checkpointed offset.
func (r *sourceReader[T]) startOffsets(ctx context.Context, ps []tp, from StartAt) (map[tp]int64, error) {
	cfg := &r.src.cfg
	if len(ps) == 0 {
		return map[tp]int64{}, nil
	}
	switch from {
	case Latest:
		return listOffsets(ctx, r.cl, ps, -1, r.isolation())
	case Timestamp:
		at, err := listOffsets(ctx, r.cl, ps, cfg.StartTimestamp.UnixMilli(), r.isolation())
		if err != nil {
			return nil, err
		}
		var none []tp // no record at or after the time: start at the end
		for _, p := range ps {
			if at[p] < 0 {
				none = append(none, p)
			}
		}
		ends, err := listOffsets(ctx, r.cl, none, -1, r.isolation())
		if err != nil {
			return nil, err
		}
		for p, off := range ends {
			at[p] = off
		}
		return at, nil
	case GroupOffsets:
		return r.groupOffsets(ctx, ps)
	case Offsets:
		return r.namedOffsets(ctx, ps)
	}
	return listOffsets(ctx, r.cl, ps, -2, 0)
}

// namedOffsets returns the offsets cfg.StartOffsets names for ps, and cfg.GroupFallback's for the others. A
// named offset outside its partition's records (below the log start offset or above the high watermark)
// is an error.
func (r *sourceReader[T]) namedOffsets(ctx context.Context, ps []tp) (map[tp]int64, error) {
	cfg := &r.src.cfg
	var named, none []tp
	for _, p := range ps {
		if _, ok := cfg.StartOffsets[TopicPartition{p.topic, p.part}]; ok {
			named = append(named, p)
		} else {
			none = append(none, p)
		}
	}
	first, err := listOffsets(ctx, r.cl, named, -2, 0)
	if err != nil {
		return nil, err
	}
	hwm, err := listOffsets(ctx, r.cl, named, -1, 0)
	if err != nil {
		return nil, err
	}
	out := map[tp]int64{}
	var errs []error
	for _, p := range named {
		off := cfg.StartOffsets[TopicPartition{p.topic, p.part}]
		if off < first[p] || off > hwm[p] {
			errs = append(errs, fmt.Errorf("kafka source: StartOffsets has offset %d for %s, outside its records: its log starts at offset %d and ends before %d "+
				"(an offset below the start was deleted by retention or DeleteRecords, one above the end is not written yet)", off, p, first[p], hwm[p]))
		}
		out[p] = off
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := r.fallback(ctx, none, out); err != nil {
		return nil, err
	}
	return out, nil
}

// groupOffsets returns the offsets cfg.Group committed for ps, and cfg.GroupFallback's for the others.
func (r *sourceReader[T]) groupOffsets(ctx context.Context, ps []tp) (map[tp]int64, error) {
	cfg := &r.src.cfg
	var topics []string
	for _, p := range ps {
		if !contains(topics, p.topic) {
			topics = append(topics, p.topic)
		}
	}
	resp, err := kadm.NewClient(r.cl).FetchOffsetsForTopics(ctx, cfg.Group, topics...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		resp, err = nil, nil // a group that never committed (some brokers say so, others answer no offsets)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka source: committed offsets of group %q on brokers %s: %w", cfg.Group, strings.Join(cfg.Brokers, ","), err)
	}
	out := map[tp]int64{}
	var none []tp
	for _, p := range ps {
		o, ok := resp.Lookup(p.topic, p.part)
		switch {
		case ok && o.Err != nil:
			return nil, fmt.Errorf("kafka source: committed offset of group %q for %s: %w", cfg.Group, p, o.Err)
		case ok && o.At >= 0:
			out[p] = o.At
		default:
			none = append(none, p)
		}
	}
	if err := r.fallback(ctx, none, out); err != nil {
		return nil, err
	}
	return out, nil
}

// fallback adds to out the offsets where cfg.GroupFallback starts the partitions ps: their first
// (Earliest) or their end (Latest).
func (r *sourceReader[T]) fallback(ctx context.Context, ps []tp, out map[tp]int64) error {
	at := int64(-2) // ListOffsets: the earliest
	if r.src.cfg.GroupFallback == Latest {
		at = -1 // the latest
	}
	fb, err := listOffsets(ctx, r.cl, ps, at, r.isolation())
	if err != nil {
		return err
	}
	for p, off := range fb {
		out[p] = off
	}
	return nil
}

// splitID returns the split id of partition p, giving it the next one if it has none.
func (r *sourceReader[T]) splitID(p tp) int {
	id, ok := r.splits[p]
	if !ok {
		id = len(r.splits)
		r.splits[p] = id
	}
	return id
}

// fetch runs on its own goroutine until stopped: it polls batches of records and hands them over. For a
// bounded source (pr not nil), a poll that brings nothing for probeIdle while a partition is short of its
// stopping offset asks the broker whether anything the client will deliver lies before it (probeEnd).
func (r *sourceReader[T]) fetch(ctx context.Context, pr *prober) {
	defer r.wg.Done()
	for {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if pr.waiting() {
			pctx, cancel = context.WithTimeout(ctx, probeIdle)
		}
		fs := r.cl.PollRecords(pctx, pollBatch)
		idle := pctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return
		}
		var ferr error
		fs.EachError(func(topic string, part int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) && !(idle && errors.Is(err, context.DeadlineExceeded)) {
				ferr = fmt.Errorf("kafka source: fetch partition %d of topic %q: %w", part, topic, err)
			}
		})
		var recs []*kgo.Record
		fs.EachRecord(func(rec *kgo.Record) { recs = append(recs, rec) })
		var reached []tp
		if pr != nil {
			pr.saw(recs)
			if idle && ferr == nil && len(recs) == 0 {
				reached = pr.probe(ctx, r)
			}
		}
		if len(recs) == 0 && ferr == nil && len(reached) == 0 {
			continue
		}
		r.mu.Lock()
		if len(recs) > 0 || len(reached) > 0 {
			r.fetched = append(r.fetched, fetched{recs: recs, reached: reached})
		}
		if ferr != nil && r.err == nil {
			r.err = ferr
		}
		r.mu.Unlock()
		r.signal()
		if ferr != nil {
			return
		}
		if _, ok := r.awaitRoom(ctx); !ok {
			return
		}
	}
}

// awaitRoom keeps the fetch goroutine from running far ahead of the task: it waits while maxBacklog
// batches wait to be emitted, until the task takes one, and returns how many it left waiting; false when
// ctx ended first.
func (r *sourceReader[T]) awaitRoom(ctx context.Context) (int, bool) {
	for {
		r.mu.Lock()
		backlog := len(r.fetched)
		r.mu.Unlock()
		if backlog < maxBacklog {
			return backlog, true
		}
		select {
		case <-ctx.Done():
			return backlog, false
		case <-r.taken:
		}
	}
}

// maxBacklog bounds fetched: the fetch goroutine waits while this many batches wait for the task, and
// goes on when the task takes one (taken).
const maxBacklog = 4

func (r *sourceReader[T]) signal() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

// discover runs on its own goroutine until stopped: every interval it looks for partitions it has not
// seen, and hands this subtask's share over to the task goroutine (before the client fetches them, so
// that the task knows a partition before its first record), starting at their earliest record. A failed
// look is logged and tried again at the next interval: a broker that is briefly away does not fail the
// job, and nothing is read that the task does not know of.
func (r *sourceReader[T]) discover(ctx context.Context, every time.Duration, known map[tp]bool) {
	defer r.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.discoverOnce(ctx, known); err != nil && ctx.Err() == nil {
			r.ctx.Logger().Warn("kafka source: partition discovery failed; trying again at the next interval", "err", err)
		}
	}
}

func (r *sourceReader[T]) discoverOnce(ctx context.Context, known map[tp]bool) error {
	rctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	found, err := findPartitions(rctx, r.cl, &r.src.cfg, false)
	if err != nil {
		return err
	}
	var fresh []tp
	for _, p := range r.assigned(found) {
		if !known[p] {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	starts, err := listOffsets(rctx, r.cl, fresh, -2, 0)
	if err != nil {
		return err
	}
	m := map[string]map[int32]kgo.Offset{}
	r.mu.Lock()
	for _, p := range fresh {
		known[p] = true
		r.added = append(r.added, partOffset{Topic: p.topic, Partition: p.part, Offset: starts[p]})
		if m[p.topic] == nil {
			m[p.topic] = map[int32]kgo.Offset{}
		}
		m[p.topic][p.part] = kgo.NewOffset().At(starts[p])
	}
	r.mu.Unlock()
	r.ctx.Logger().Info("kafka source: discovered partitions", "partitions", fmt.Sprint(fresh))
	r.cl.AddConsumePartitions(m)
	r.signal()
	return nil
}

// committer runs on its own goroutine: it commits the newest completed checkpoint's offsets to the group,
// one commit at a time (a newer checkpoint replaces one not committed yet), and what is pending at Close.
func (r *sourceReader[T]) committer() {
	defer r.wg.Done()
	for {
		select {
		case <-r.commitC:
			r.commitNow()
		case <-r.closing:
			r.commitNow()
			return
		}
	}
}

func (r *sourceReader[T]) commitNow() {
	r.mu.Lock()
	offs := r.commit
	r.commit = nil
	r.mu.Unlock()
	if len(offs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	group := r.src.cfg.Group
	resp, err := kadm.NewClient(r.cl).CommitOffsets(ctx, group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		// The commit only feeds lag dashboards: the job goes on, and the next checkpoint commits again.
		r.commitFailures.Add(1)
		r.ctx.Logger().Warn("kafka source: commit offsets to the group failed", "group", group, "err", err)
	}
}

// PollNext implements runnel.SourceReader: it emits the oldest fetched batch, or its first
// MaxPollRecords records, leaving the rest for the next poll.
func (r *sourceReader[T]) PollNext(out runnel.Collector[T]) (runnel.InputStatus, error) {
	if !r.started {
		if err := r.start(); err != nil {
			return runnel.EndOfInput, err
		}
	}
	r.mu.Lock()
	err, added := r.err, r.added
	r.added = nil
	// The batch, or its first MaxPollRecords records: the rest stays first in line for the next poll.
	var batch *fetched
	var rest []*kgo.Record
	if len(r.fetched) > 0 {
		f := r.fetched[0]
		if n := r.src.cfg.maxPollRecords(); len(f.recs) > n {
			f.recs, rest = f.recs[:n], f.recs[n:]
			r.fetched[0].recs = rest
		} else {
			r.fetched[0] = fetched{}
			r.fetched = r.fetched[1:]
			select {
			case r.taken <- struct{}{}:
			default:
			}
		}
		batch = &f
	}
	more := len(r.fetched) > 0
	r.mu.Unlock()
	// On a stream with event time each partition gets its own watermark (runnel.SplitOutput), and the
	// record's Kafka timestamp is the assigner's recordTs.
	splits, _ := out.(runnel.SplitOutput[T])
	for _, a := range added {
		p := tp{a.Topic, a.Partition}
		if _, ok := r.offsets[p]; ok {
			continue
		}
		r.offsets[p] = a.Offset
		id := r.splitID(p)
		if splits != nil && r.announced {
			splits.ForSplit(id) // it counts from now on: it holds the watermark back until it has records or idles
		}
	}
	if splits != nil && !r.announced {
		// Every assigned partition counts from the start, so that one read first does not carry the
		// watermark past the records of those not read yet.
		r.announced = true
		for p, id := range r.splits {
			if r.done[p] {
				continue // already at its end: nothing will come
			}
			splits.ForSplit(id)
		}
	}
	if r.finished() {
		return runnel.EndOfInput, nil
	}
	if batch == nil {
		if err != nil {
			return runnel.EndOfInput, err
		}
		return runnel.NothingAvailable, nil
	}
	tag := r.src.cfg.DecodeErrors
	for _, rec := range batch.recs {
		p := tp{rec.Topic, rec.Partition}
		next, ok := r.offsets[p]
		if !ok || rec.Offset < next {
			continue // not this subtask's, or emitted already
		}
		if end, ok := r.end[p]; ok && rec.Offset >= end {
			// The position is past the stopping offset: whatever lay before it (nothing, or records
			// compacted away or aborted) has been fetched.
			r.reach(p, splits)
			continue
		}
		r.offsets[p] = rec.Offset + 1
		if !rec.Attrs.IsControl() {
			kr := Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value,
				Timestamp: rec.Timestamp, Headers: rec.Headers}
			v, err := r.src.decode(kr)
			switch {
			case err != nil && tag.ID() != "":
				tag.Emit(r.ctx, DecodeError{Record: kr, Err: err.Error()})
			case err != nil:
				return runnel.EndOfInput, fmt.Errorf("kafka source: cannot decode the record at offset %d of partition %d of topic %q: %w",
					rec.Offset, rec.Partition, rec.Topic, err)
			case splits != nil:
				c := splits.ForSplit(r.splits[p])
				if tc, ok := c.(runnel.TimestampedCollector[T]); ok {
					tc.CollectWithTimestamp(v, rec.Timestamp.UnixMilli())
				} else {
					c.Collect(v)
				}
			default:
				out.Collect(v)
			}
		}
		if end, ok := r.end[p]; ok && rec.Offset+1 >= end {
			r.reach(p, splits)
		}
	}
	if rest == nil {
		for _, p := range batch.reached {
			r.reach(p, splits)
		}
	}
	if r.finished() {
		return runnel.EndOfInput, nil
	}
	if more {
		return runnel.MoreAvailable, nil
	}
	return runnel.NothingAvailable, nil
}

// reach marks partition p of a bounded source as done: its position reached its stopping offset, which
// becomes its offset, and on a stream with event time it stops counting for the watermark.
func (r *sourceReader[T]) reach(p tp, splits runnel.SplitOutput[T]) {
	if r.done[p] {
		return
	}
	r.done[p] = true
	if end := r.end[p]; r.offsets[p] < end {
		r.offsets[p] = end
	}
	// The client stops fetching it: a partition that stops at a time or an offset may hold much more,
	// which would only be fetched to be dropped while the subtask reads its other partitions.
	r.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.part}})
	if splits != nil {
		splits.ReleaseSplit(r.splits[p])
	}
}

// finished reports whether a bounded source has emitted everything up to its end offsets.
func (r *sourceReader[T]) finished() bool {
	if !r.src.cfg.Bounded {
		return false
	}
	for p, end := range r.end {
		if r.offsets[p] < end {
			return false
		}
	}
	return true
}

// Available implements runnel.SourceReader.
func (r *sourceReader[T]) Available() <-chan struct{} { return r.ready }

// ReplaysDeterministically implements runnel.DeterministicReader, for a subtask restored with the offset
// of exactly one partition that discovers no others: the records of one partition come in offset order.
// With several, they are merged in the order the fetches return them, which a replay would not repeat;
// with discovery on, a partition found during the replay would mix its records in; with none restored (a
// failure before the first checkpoint) the partitions are not known yet. Either way task failover falls
// back to region failover for this subtask.
func (r *sourceReader[T]) ReplaysDeterministically() bool {
	if !r.started {
		r.takeRestored()
	}
	return len(r.restored) == 1 && r.src.cfg.discoveryInterval() == 0
}

// SnapshotState implements runnel.CheckpointedReader: the offsets go to the union list state (so that a
// restore at another parallelism can redistribute them), not into the reader's own bytes, which stay
// empty. With a group, they are also kept until the checkpoint completes, to be committed then.
func (r *sourceReader[T]) SnapshotState(id int64) ([]byte, error) {
	if !r.started {
		// A checkpoint before the first poll: the restored offsets of this subtask's partitions go on as
		// they came (after a rescale, only its own: another subtask's newer ones must not meet stale
		// copies), and a job that never started stays so, to start at StartAt.
		r.takeRestored()
		var elems []partOffset
		if r.wasStarted {
			elems = append(elems, partOffset{Partition: -1})
		}
		ps := make([]tp, 0, len(r.restored))
		for p := range r.restored {
			if r.mine(p) {
				ps = append(ps, p)
			}
		}
		sortTPs(ps)
		for _, p := range ps {
			elems = append(elems, partOffset{Topic: p.topic, Partition: p.part, Offset: r.restored[p]})
		}
		r.state.Update(elems)
		if r.stops != nil {
			var stops []partOffset
			for p, end := range r.restoredEnd {
				if r.mine(p) {
					stops = append(stops, partOffset{Topic: p.topic, Partition: p.part, Offset: end})
				}
			}
			sortPartOffsets(stops)
			r.stops.Update(stops)
		}
		return nil, nil
	}
	ps := make([]tp, 0, len(r.offsets))
	for p := range r.offsets {
		ps = append(ps, p)
	}
	sortTPs(ps)
	elems := make([]partOffset, 0, len(ps)+1)
	elems = append(elems, partOffset{Partition: -1}) // started
	for _, p := range ps {
		elems = append(elems, partOffset{Topic: p.topic, Partition: p.part, Offset: r.offsets[p]})
	}
	r.state.Update(elems)
	if r.stops != nil {
		stops := make([]partOffset, 0, len(r.end))
		for _, p := range ps {
			if end, ok := r.end[p]; ok {
				stops = append(stops, partOffset{Topic: p.topic, Partition: p.part, Offset: end})
			}
		}
		r.stops.Update(stops)
	}
	if r.src.cfg.Group != "" {
		offs := kadm.Offsets{}
		for _, p := range ps {
			offs.AddOffset(p.topic, p.part, r.offsets[p], -1)
		}
		if len(r.pending) == maxPendingCommits {
			r.pending = r.pending[1:]
		}
		r.pending = append(r.pending, pendingCommit{id: id, offsets: offs})
	}
	return nil, nil
}

// NotifyCheckpointComplete implements runnel.CheckpointListener: with a group, the offsets of checkpoint
// id (or of the newest earlier one this subtask took) are committed to it, in the background.
func (r *sourceReader[T]) NotifyCheckpointComplete(id int64) error {
	var offs kadm.Offsets
	for len(r.pending) > 0 && r.pending[0].id <= id {
		offs = r.pending[0].offsets
		r.pending = r.pending[1:]
	}
	if offs == nil || r.commitC == nil {
		return nil
	}
	r.mu.Lock()
	r.commit = offs
	r.mu.Unlock()
	select {
	case r.commitC <- struct{}{}:
	default:
	}
	return nil
}

// RestoreState implements runnel.CheckpointedReader for checkpoints of the source before its offsets were
// list state: the reader's bytes held, per partition of the one topic, the offset of the next record.
// Such a checkpoint restores at its own parallelism only.
func (r *sourceReader[T]) RestoreState(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	topics := r.src.cfg.topics()
	if len(topics) != 1 {
		return fmt.Errorf("kafka source: the checkpoint holds offsets of the source's older format, which name no topic; the source reads %d topics now (%q): restore it with its one topic first", len(topics), topics)
	}
	bad := fmt.Errorf("kafka source: malformed checkpointed offsets % x", b)
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return bad
	}
	b = b[k:]
	for range n {
		p, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return bad
		}
		off, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 || p > 1<<31-1 {
			return bad
		}
		r.restored[tp{topics[0], int32(p)}] = int64(off)
		b = b[k1+k2:]
	}
	if len(b) != 0 {
		return bad
	}
	r.wasStarted, r.oldRule = true, true
	return nil
}

// Close implements runnel.SourceReader: it stops the goroutines (the committer after committing what is
// pending) and closes the client.
func (r *sourceReader[T]) Close() error {
	if r.stop != nil {
		r.stop()
		close(r.closing)
	}
	r.wg.Wait()
	if r.cl != nil {
		r.cl.Close()
	}
	return nil
}
