// Package sequence is the engine's own semantics checker, in the spirit of Flink's SemanticsCheckMapper: a
// deterministic generator emits records (key, seq) whose seq rises by one per key, and a keyed operator
// checks, per key, that every seq arrives exactly once and in order. Run it with checkpoints and injected
// failures to see that recovery is exactly-once: the checker must count exactly the generated records and
// no anomaly.
//
//	source -> map (identity) -> keyBy(key) -> check (keyed process) -> sink (parallelism 1)
//
// # Generator
//
// Each key is owned by exactly one source subtask, so that its sequence is well defined: key k belongs to
// subtask k % P (P the source parallelism, which must not exceed --keys). Subtask s owns the keys
// s, s+P, s+2P, ... below K, m of them, and its i-th record is key s + (i % m)·P with seq i / m. The record
// is a pure function of (s, i), so a source rewound to a checkpointed i re-emits exactly the same records.
// With --records N the N records are split over the subtasks (the first N % P get one more); with
// --records 0, or when the run has a --duration and --records is not given, the source is unbounded.
//
// # Checker rules
//
// The check operator keeps, per key and in keyed state (so the counters are checkpointed and restored
// together with the sources' positions), the highest seq seen (last, -1 before the first record), the
// counters below, and the gaps: the ranges of seqs skipped so far. For each record with sequence number seq:
//
//   - seq == last+1: in order; records += 1.
//   - seq > last+1: a gap; lost += seq-last-1 (the skipped seqs are remembered), records += 1.
//   - seq <= last and seq lies in a remembered gap: a late arrival; out_of_order += 1, lost -= 1,
//     records += 1, and seq leaves the gap.
//   - seq <= last otherwise: a repeat of a seq already seen; duplicated += 1.
//
// So records counts the distinct seqs delivered, lost the seqs not (yet) delivered, duplicated the
// deliveries beyond the first, and out_of_order the seqs delivered after a higher one. Flink's checker only
// tells "seq == last+1" from "anything else"; these rules split "anything else" into its three causes. At
// most MaxGaps gap ranges are remembered per key; when there are more, the oldest is forgotten and a seq
// from it that still arrives counts as duplicated. At end of input (bounded runs) each key's missing tail,
// the seqs the generator emitted after the last one seen, is added to lost, and keys never seen count all
// their seqs as lost.
//
// # Sink and report
//
// check emits a key's running counters every --emit-every records of that key, whenever an anomaly is
// counted, and for every key at end of input. The sink keeps the latest counters per key, ordered by the
// check subtask's attempt and the number of records the key has seen, so replays after a restore (which
// re-emit older counters from a newer attempt) are idempotent. The run's report gains, at top level,
//
//	"checker": {"records": N, "lost": N, "duplicated": N, "out_of_order": N, "keys": N, "expected_records": N,
//	            "verdict": "OK"}
//
// summed over keys (expected_records is 0 for unbounded runs). With --progress-dir the sink's writers also log
// when each report arrived (progress.go), for following the output over time. Under exactly-once recovery a bounded run
// ends with records == expected_records == --records and no anomaly.
//
// # Verdict
//
// A run that ended by itself (FINISHED) is judged in full: OK when every expected record arrived exactly
// once and in order; OK_APPROXIMATE when nothing was duplicated or reordered and the records missing are
// exactly those the approximate failovers reported lost; VIOLATION otherwise. A run stopped before the end
// of its input (by --duration, a signal, or a failure) cannot be judged on what it never sent: its verdict
// is INCOMPLETE when what was checked so far is clean (no gap, duplicate or reorder; under approximate
// recovery no more gaps than the failovers reported lost), and VIOLATION when it is not: an anomaly seen
// is one whether or not the run went on.
//
// A run restored from a checkpoint in which the job had already finished (JobResult.RestoredFrom.Finished:
// the final checkpoint of a bounded run) checks nothing: every task had ended its input, so none reads or
// emits a record, and check does not report its counters again (as Flink's operators finished on restore
// do not run). Its verdict is ALREADY_FINISHED, with every counter 0 and no key counted as lost. The
// counters the checkpoint holds in check's state were judged by the run that took it; judging them again
// would take that run's failover report (under approximate recovery its loss), which no checkpoint holds.
package sequence

import (
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// Record is one generated record: the seq-th record of key Key.
type Record struct {
	Key int64
	Seq int64
}

// Counters are one key's checker counters, as the check operator emits them.
type Counters struct {
	Key        int64
	Records    int64 // distinct seqs delivered
	Lost       int64 // seqs skipped and not delivered since
	Duplicated int64 // deliveries of an already delivered seq
	OutOfOrder int64 // seqs delivered after a higher one
	Seen       int64 // records of the key that reached the checker, anomalies included
	Last       int64 // highest seq seen
	Attempt    int64 // attempt of the check subtask that emitted the counters
	Final      bool  // emitted at end of input
}

// Checker is the report's "checker" object: counters summed over keys.
type Checker struct {
	Records         int64   `json:"records"`
	Lost            int64   `json:"lost"`
	Duplicated      int64   `json:"duplicated"`
	OutOfOrder      int64   `json:"out_of_order"`
	Keys            int     `json:"keys"`
	ExpectedRecords int64   `json:"expected_records"`
	Verdict         Verdict `json:"verdict"`
}

// Verdict is the checker's judgement of a run (see the package doc).
type Verdict string

// Verdicts.
const (
	// VerdictOK: the run ended by itself and every expected record arrived exactly once, in order.
	VerdictOK Verdict = "OK"
	// VerdictApproximateOK: the run ended by itself; nothing was duplicated or reordered, and the records
	// missing are exactly those the approximate failovers reported lost.
	VerdictApproximateOK Verdict = "OK_APPROXIMATE"
	// VerdictIncomplete: the run stopped before the end of its input, and what was checked so far is clean.
	VerdictIncomplete Verdict = "INCOMPLETE"
	// VerdictViolation: records were lost (beyond the reported loss), duplicated or reordered.
	VerdictViolation Verdict = "VIOLATION"
	// VerdictAlreadyFinished: the run was restored from a checkpoint in which the job had already
	// finished, so there was nothing to check; the run that took the checkpoint gave the verdict.
	VerdictAlreadyFinished Verdict = "ALREADY_FINISHED"
)

// AlreadyFinished reports whether res is a run restored from a checkpoint in which the job had already
// finished: it read and emitted nothing.
func AlreadyFinished(res *runnel.JobResult) bool {
	return res != nil && res.RestoredFrom != nil && res.RestoredFrom.Finished
}

// Judge returns the verdict on counters c of a run that ended with res (nil: a run not known to have
// ended). It reads c's counters, not its Verdict.
func Judge(c Checker, res *runnel.JobResult) Verdict {
	clean := c.Duplicated == 0 && c.OutOfOrder == 0
	if AlreadyFinished(res) && clean && c.Lost == 0 {
		return VerdictAlreadyFinished
	}
	reported := CheckedLoss(res)
	approximate := false
	if res != nil {
		for _, f := range res.Failovers {
			approximate = approximate || f.Strategy == "approximate"
		}
	}
	if res != nil && res.Status == "FINISHED" && c.ExpectedRecords > 0 {
		switch {
		case clean && c.Lost == 0 && c.Records == c.ExpectedRecords:
			return VerdictOK
		case approximate && clean && uint64(c.Lost) == reported && c.Records+c.Lost == c.ExpectedRecords:
			return VerdictApproximateOK
		case approximate && clean && ReportLoss(res) > 0 && uint64(c.Lost) <= reported && c.Records+c.Lost <= c.ExpectedRecords:
			// A restarted sink also lost some of check's counter reports (reported, on the channels from
			// check): a key whose last reports were among them, its final ones included, keeps older counters
			// at the sink, which understate both its records and its loss but never overstate them.
			return VerdictApproximateOK
		}
		return VerdictViolation
	}
	// Stopped before the end of the input (or unbounded): what is missing at the end was never sent, but a
	// gap before the latest record of a key is a loss. Under approximate recovery a gap may be part of the
	// reported loss, which the checker may not have seen all of yet.
	if clean && (c.Lost == 0 || approximate && uint64(c.Lost) <= reported) {
		return VerdictIncomplete
	}
	return VerdictViolation
}

// OK reports whether the checker saw no anomaly and, for a bounded run, exactly the expected records.
func (c Checker) OK() bool {
	return c.Lost == 0 && c.Duplicated == 0 && c.OutOfOrder == 0 && (c.ExpectedRecords == 0 || c.Records == c.ExpectedRecords)
}

// Job is a configured sequence run.
type Job struct {
	Records   uint64  // records in total; 0: unbounded
	Keys      int     // distinct keys
	Rate      float64 // records per second per source subtask; 0: as fast as possible
	EmitEvery int64   // emit a key's counters every N of its records
	// CheckRate, if positive, slows each check subtask to this many records per second: a slow stage
	// that backpressures the map and the sources, as a slow sink does.
	CheckRate float64
	// ProgressDir, when set, is where the sink's writers log the time of every report (progress.go).
	ProgressDir string

	fs   *pflag.FlagSet
	gen  generator
	sink *run.LatestSink[int64, Counters] // outlives the attempts of its writers
}

// Defaults of the example's flags.
const (
	DefaultRecords   = 1_000_000
	DefaultKeys      = 16
	DefaultEmitEvery = 100
)

// New registers the example's flags on fs (nil: none) and returns the job they configure.
func New(fs *pflag.FlagSet) *Job {
	j := &Job{Records: DefaultRecords, Keys: DefaultKeys, EmitEvery: DefaultEmitEvery, fs: fs}
	if fs != nil {
		fs.Uint64Var(&j.Records, "records", j.Records, "records to generate in total (0: unbounded, stop with --duration)")
		fs.IntVar(&j.Keys, "keys", j.Keys, "distinct keys (at least the parallelism: each key belongs to one source subtask)")
		fs.Float64Var(&j.Rate, "rate", 0, "records per second per source subtask (0: as fast as possible)")
		fs.Int64Var(&j.EmitEvery, "emit-every", j.EmitEvery, "emit a key's counters to the sink every N of its records (and on every anomaly)")
		fs.Float64Var(&j.CheckRate, "check-rate", 0, "slow each check subtask to this many records per second, which backpressures everything before it (0: as fast as possible)")
		fs.StringVar(&j.ProgressDir, "progress-dir", "", "an existing directory, shared by every process of the job, where each sink writer logs the wall-clock time of every report it receives (one file per writer)")
	}
	return j
}

// generator computes the records of the source; it is a pure function of (subtask, i).
type generator struct {
	keys, p int
	records uint64 // 0: unbounded
}

// keysOf returns m, the number of keys subtask s owns.
func (g generator) keysOf(s int) int {
	if s >= g.keys {
		return 0
	}
	return (g.keys - s + g.p - 1) / g.p
}

// record returns record i of subtask s.
func (g generator) record(s int, i uint64) Record {
	m := uint64(g.keysOf(s))
	return Record{Key: int64(s) + int64(i%m)*int64(g.p), Seq: int64(i / m)}
}

// limit returns the number of records subtask s emits (bounded runs), as connector.Generator splits them.
func (g generator) limit(s int) uint64 {
	n := g.records / uint64(g.p)
	if uint64(s) < g.records%uint64(g.p) {
		n++
	}
	return n
}

// Expected returns how many records key k gets in a bounded run of records records over keys keys from p
// source subtasks: the seqs of k are 0 to Expected-1.
func Expected(records uint64, keys, p int, k int64) int64 {
	g := generator{keys: keys, p: p, records: records}
	return g.expected(k)
}

func (g generator) expected(k int64) int64 {
	if g.records == 0 || k < 0 || k >= int64(g.keys) {
		return 0
	}
	s := int(k % int64(g.p))
	m := uint64(g.keysOf(s))
	j := uint64(k) / uint64(g.p) // k is the j-th key of s
	n := g.limit(s)
	// Records i < n with i % m == j.
	e := n / m
	if j < n%m {
		e++
	}
	return int64(e)
}

// Build adds the sequence pipeline to env.
func (j *Job) Build(env *runnel.Environment, opts run.Options) error {
	p := env.Config().Parallelism
	switch {
	case j.Keys < 1:
		return fmt.Errorf("--keys must be at least 1, got %d", j.Keys)
	case j.Keys < p:
		return fmt.Errorf("--keys %d is less than the parallelism %d: each source subtask needs a key of its own", j.Keys, p)
	case j.EmitEvery < 1:
		return fmt.Errorf("--emit-every must be at least 1, got %d", j.EmitEvery)
	case j.Rate < 0:
		return fmt.Errorf("--rate must not be negative, got %v", j.Rate)
	case j.CheckRate < 0:
		return fmt.Errorf("--check-rate must not be negative, got %v", j.CheckRate)
	}
	if j.ProgressDir != "" {
		if fi, err := os.Stat(j.ProgressDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--progress-dir %q: not a directory (%v)", j.ProgressDir, err)
		}
	}
	records := j.Records
	if opts.Duration > 0 && (j.fs == nil || !j.fs.Changed("records")) {
		records = 0
	}
	j.gen = generator{keys: j.Keys, p: p, records: records}
	gen := j.gen
	rc := codec.MustStruct[Record]()
	src := runnel.FromSource(env, connector.Generator(gen.record, connector.GeneratorOptions{TotalRecords: records, RatePerSubtask: j.Rate})).
		Name("source").WithCodec(rc)
	mapped := runnel.Map(src, func(r Record) (Record, error) { return r, nil }).Name("map").WithCodec(rc)
	every, rate := j.EmitEvery, j.CheckRate
	counters := runnel.Process(runnel.KeyBy(mapped, func(r Record) int64 { return r.Key }),
		func() runnel.KeyedProcessFunction[int64, Record, Counters] {
			return &check{every: every, gen: gen, pace: pacer{rate: rate}}
		}).
		Name(checkName).WithCodec(codec.MustStruct[Counters]())
	j.sink = run.NewLatestSink(func(c Counters) int64 { return c.Key }, newer)
	var sink runnel.Sink[Counters] = j.sink
	if j.ProgressDir != "" {
		sink = progressSink{Sink: j.sink, dir: j.ProgressDir}
	}
	counters.SinkTo(sink).Name("sink").SetParallelism(1)
	// On a cluster the sink's writers run in the TaskManagers' builds of the job: their latest counters
	// are merged into this one, so that Checker sees them wherever the sink ran.
	runnel.RegisterAccumulator(env, SinkAccumulator, j.sink)
	return nil
}

// SinkAccumulator is the name of the accumulator that holds the sink's latest counters per key.
const SinkAccumulator = "sequence.sink"

// Latest returns the latest counters per key seen by the sink (after a bounded job finished: the final ones).
func (j *Job) Latest() map[int64]Counters {
	if j.sink == nil {
		return nil
	}
	return j.sink.Latest()
}

// Checker sums the latest counters over keys. When res says a bounded job FINISHED, keys the sink never
// heard of count all their expected records as lost, unless the job had already finished in the
// checkpoint it was restored from (nothing was sent then). res may be nil.
func (j *Job) Checker(res *runnel.JobResult) Checker {
	latest := j.Latest()
	var c Checker
	finished := res != nil && res.Status == "FINISHED" && !AlreadyFinished(res)
	// At the end of a bounded run every key in a check subtask's state is reported final (EndInput). A key
	// whose latest counters are not final was in no check's state at the end: an approximate failover
	// restarted its check subtask, which then got none of its records. Its older counters, from an attempt
	// whose state is gone, do not count; all its records are lost. (Unless some of check's reports were
	// lost on their way to the sink: then its final counters may be what is missing; Judge allows for it.)
	stale := func(v Counters) bool {
		return j.gen.records > 0 && finished && !v.Final && ReportLoss(res) == 0
	}
	for k, v := range latest {
		c.Duplicated += v.Duplicated
		c.OutOfOrder += v.OutOfOrder
		if stale(v) {
			c.Lost += j.gen.expected(k)
			continue
		}
		c.Records += v.Records
		c.Lost += v.Lost
	}
	c.Keys = len(latest)
	if j.gen.records > 0 {
		c.ExpectedRecords = int64(j.gen.records)
		if finished {
			for k := int64(0); k < int64(j.gen.keys); k++ {
				if _, ok := latest[k]; !ok {
					c.Lost += j.gen.expected(k)
				}
			}
		}
	}
	c.Verdict = Judge(c, res)
	return c
}

// ReportFields adds the "checker" object to the run's report.
func (j *Job) ReportFields(res *runnel.JobResult) map[string]any {
	return map[string]any{"checker": j.Checker(res)}
}

// Verify returns an error when the checker's verdict is a VIOLATION: a record lost beyond the reported
// loss, duplicated or reordered.
func (j *Job) Verify(res *runnel.JobResult) error { return verify(j.Checker(res), res) }

// verify is Verify for the checker's figures c.
func verify(c Checker, res *runnel.JobResult) error {
	if c.Verdict != VerdictViolation {
		return nil
	}
	return fmt.Errorf("checker: VIOLATION: %d records of %d, lost %d (the failovers reported %d), duplicated %d, out of order %d",
		c.Records, c.ExpectedRecords, c.Lost, CheckedLoss(res), c.Duplicated, c.OutOfOrder)
}

// Summary prints the checker's totals and the verdict.
func (j *Job) Summary(w io.Writer, res *runnel.JobResult) error {
	c := j.Checker(res)
	reported := CheckedLoss(res)
	var verdict string
	switch c.Verdict {
	case VerdictOK:
		verdict = "OK: every record exactly once, in order"
	case VerdictApproximateOK:
		verdict = fmt.Sprintf("OK for approximate recovery: the loss is exactly the %d records the failovers reported, nothing duplicated or reordered", reported)
		if n := ReportLoss(res); n > 0 && c.Records+c.Lost < c.ExpectedRecords {
			verdict = fmt.Sprintf("OK for approximate recovery: nothing duplicated or reordered, %d lost within the %d the failovers reported; the restarted sink also lost %d of check's counter reports (reported), so some keys' totals are the last ones it heard",
				c.Lost, reported, n)
		}
	case VerdictAlreadyFinished:
		r := res.RestoredFrom
		_, err := fmt.Fprintf(w, "checker: nothing to check: the job had already finished in checkpoint %d of %s, which it was restored from; no record was sent (the run that took the checkpoint gave the verdict)\n",
			r.CheckpointID, r.Location)
		return err
	case VerdictIncomplete:
		status := "unknown"
		if res != nil {
			status = res.Status
		}
		verdict = fmt.Sprintf("INCOMPLETE: stopped before the end of the input (job %s); %d records checked, no loss, duplicates or reorders seen so far", status, c.Records)
		if c.Lost > 0 {
			verdict = fmt.Sprintf("INCOMPLETE: stopped before the end of the input (job %s); %d records checked, the %d lost within the %d the failovers reported, no duplicates or reorders seen so far",
				status, c.Records, c.Lost, reported)
		}
	default:
		verdict = "VIOLATION"
		if res == nil || res.Status != "FINISHED" {
			verdict = "VIOLATION (seen before the run stopped short of the end of its input)"
		}
	}
	exp := "unbounded"
	if c.ExpectedRecords > 0 {
		exp = fmt.Sprintf("of %d", c.ExpectedRecords)
	}
	_, err := fmt.Fprintf(w, "checker: %d records (%s) over %d keys; lost %d, duplicated %d, out of order %d: %s\n",
		c.Records, exp, c.Keys, c.Lost, c.Duplicated, c.OutOfOrder, verdict)
	return err
}

// checkName is the name of the check operator.
const checkName = "check"

// CheckedLoss sums the records all failovers of res lost (FailoverTotals, by edge) on the edges that carry sequence records (into
// map and into check): the loss the checker can see. A failover that restarts the sink also loses some of
// check's counter reports on the channels from check to the sink; those are not sequence records, and the
// sink's latest-counters-per-key view makes up for them at the next report of each key.
func CheckedLoss(res *runnel.JobResult) uint64 {
	if res == nil {
		return 0
	}
	var n uint64
	for _, e := range res.FailoverTotals.Edges {
		if e.From != checkName {
			n += e.RecordsLost
		}
	}
	return n
}

// ReportLoss sums the records the failovers of res lost on the channels from check to the sink: counter
// reports, not sequence records (see CheckedLoss).
func ReportLoss(res *runnel.JobResult) uint64 {
	if res == nil {
		return 0
	}
	var n uint64
	for _, e := range res.FailoverTotals.Edges {
		if e.From == checkName {
			n += e.RecordsLost
		}
	}
	return n
}

// MaxGaps bounds the gap ranges remembered per key.
const MaxGaps = 1024

// KeyState is the checker's keyed state for one key.
type KeyState struct {
	Last       int64 // highest seq seen; -1 before the first record
	Records    int64
	Lost       int64
	Duplicated int64
	OutOfOrder int64
	Seen       int64
	// Gaps holds the ranges of skipped seqs as pairs lo, hi (inclusive), in ascending order. The slice is
	// never modified in place, only replaced, because a checkpoint may still be serializing the old value.
	Gaps []int64
}

// NewKeyState returns the state of a key before its first record.
func NewKeyState() KeyState { return KeyState{Last: -1} }

// Observe applies the checker rules to one record with sequence number seq and reports whether it was an
// anomaly (anything but seq == last+1).
func (s *KeyState) Observe(seq int64) (anomaly bool) {
	s.Seen++
	switch {
	case seq == s.Last+1:
		s.Records++
		s.Last = seq
		return false
	case seq > s.Last+1:
		s.Lost += seq - s.Last - 1
		s.addGap(s.Last+1, seq-1)
		s.Records++
		s.Last = seq
	case s.removeFromGap(seq):
		s.OutOfOrder++
		s.Lost--
		s.Records++
	default:
		s.Duplicated++
	}
	return true
}

// EndInput counts the seqs from last+1 to expected-1, which never arrived, as lost.
func (s *KeyState) EndInput(expected int64) {
	if expected > s.Last+1 {
		s.Lost += expected - s.Last - 1
		s.addGap(s.Last+1, expected-1)
		s.Last = expected - 1
	}
}

func (s *KeyState) addGap(lo, hi int64) {
	gaps := s.Gaps
	if len(gaps) >= 2*MaxGaps {
		gaps = gaps[2:] // forget the oldest
	}
	s.Gaps = append(slices.Clip(gaps), lo, hi)
}

// removeFromGap removes seq from the gap that holds it, if any.
func (s *KeyState) removeFromGap(seq int64) bool {
	for i := 0; i < len(s.Gaps); i += 2 {
		lo, hi := s.Gaps[i], s.Gaps[i+1]
		if seq < lo || seq > hi {
			continue
		}
		gaps := make([]int64, 0, len(s.Gaps)+2)
		gaps = append(gaps, s.Gaps[:i]...)
		if lo < seq {
			gaps = append(gaps, lo, seq-1)
		}
		if seq < hi {
			gaps = append(gaps, seq+1, hi)
		}
		s.Gaps = append(gaps, s.Gaps[i+2:]...)
		return true
	}
	return false
}

// check is the keyed checker operator.
type check struct {
	runnel.KeyedProcessBase[int64, Counters]
	every   int64
	gen     generator
	state   runnel.ValueState[KeyState]
	attempt int64
	pace    pacer
}

// pacer holds a subtask to a rate: every 64 records it sleeps until the records it took are no more than
// the rate allows since its first. The wall clock only paces; it decides nothing the output depends on.
type pacer struct {
	rate  float64
	n     int64
	start time.Time
}

func (p *pacer) take() {
	if p.rate <= 0 {
		return
	}
	if p.n == 0 {
		p.start = time.Now()
	}
	p.n++
	if p.n%64 != 0 {
		return
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

func (c *check) Open(ctx runnel.KeyedContext[int64]) error {
	c.attempt = int64(ctx.Attempt())
	var err error
	c.state, err = runnel.NewValueState[KeyState](ctx, "sequence")
	return err
}

func (c *check) ProcessElement(ctx runnel.KeyedContext[int64], r Record, out runnel.Collector[Counters]) error {
	c.pace.take()
	s, ok := c.state.Value()
	if !ok {
		s = NewKeyState()
	}
	anomaly := s.Observe(r.Seq)
	c.state.Update(s)
	if anomaly || s.Seen%c.every == 0 {
		out.Collect(c.counters(r.Key, &s, false))
	}
	return nil
}

func (c *check) EndInput(ctx runnel.KeyedContext[int64], out runnel.Collector[Counters]) error {
	return ctx.ForEachKey(func(k int64) error {
		s, ok := c.state.Value()
		if !ok {
			s = NewKeyState()
		}
		if c.gen.records > 0 {
			s.EndInput(c.gen.expected(k))
			c.state.Update(s)
		}
		out.Collect(c.counters(k, &s, true))
		return nil
	})
}

func (c *check) counters(k int64, s *KeyState, final bool) Counters {
	return Counters{Key: k, Records: s.Records, Lost: s.Lost, Duplicated: s.Duplicated, OutOfOrder: s.OutOfOrder,
		Seen: s.Seen, Last: s.Last, Attempt: c.attempt, Final: final}
}

// newer reports whether a replaces b as a key's latest counters: a later attempt of the check subtask, or
// the same attempt having seen more records, or at the same count the final counters (end of input adds
// the missing tail). One attempt emits one set of counters per count and kind, so that is the order of
// emission; the remaining fields only break ties between values that cannot both occur. It is a strict
// total order, which makes merging the sink's accumulator a join (run.LatestSink).
func newer(a, b Counters) bool {
	ka := []int64{a.Attempt, a.Seen, b2i(a.Final), a.Records, a.Lost, a.Duplicated, a.OutOfOrder, a.Last}
	kb := []int64{b.Attempt, b.Seen, b2i(b.Final), b.Records, b.Lost, b.Duplicated, b.OutOfOrder, b.Last}
	return slices.Compare(ka, kb) > 0
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
