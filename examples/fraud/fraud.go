// Package fraud is the fraud detection example (the job of Flink's DataStream tutorial): transactions are
// keyed by account, and a keyed process function raises an alert when a small transaction (below $1, a
// card being tested) is followed by a large one (above $500) within one minute. The "last was small" flag
// is keyed state; a processing-time timer one minute after the small transaction clears it.
//
//	transactions -> keyBy(account) -> detector (keyed process, flag + timer) -> alerts (sink, parallelism 1)
//
// The generator makes deterministic transactions; every --fraud-every-th account tests a card with a small
// amount and then spends a large one.
package fraud

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// Transaction is one card transaction; Cents is its amount.
type Transaction struct {
	Account int64
	Cents   int64
	Seq     int64
}

// Alert names an account whose small transaction was followed by a large one within the window.
type Alert struct {
	Account int64
	// Small and Large are the sequence numbers of the two transactions.
	Small, Large int64
}

// The thresholds of the detector, in cents.
const (
	SmallCents = 100
	LargeCents = 50_000
)

// DefaultWindow is how long after a small transaction a large one raises an alert.
const DefaultWindow = time.Minute

// Detector is the keyed process function: one instance per subtask, state per account.
type Detector struct {
	runnel.KeyedProcessBase[int64, Alert]
	Window time.Duration
	small  runnel.ValueState[int64] // the sequence number of the last transaction, when it was small
	timer  runnel.ValueState[int64] // the processing time of the timer that clears it
}

// Open declares the detector's state.
func (d *Detector) Open(ctx runnel.KeyedContext[int64]) error {
	var err error
	if d.small, err = runnel.NewValueState[int64](ctx, "small"); err != nil {
		return err
	}
	d.timer, err = runnel.NewValueState[int64](ctx, "timer")
	return err
}

// ProcessElement raises an alert for a large transaction after a small one, and remembers small ones for
// the window.
func (d *Detector) ProcessElement(ctx runnel.KeyedContext[int64], t Transaction, out runnel.Collector[Alert]) error {
	if small, ok := d.small.Value(); ok {
		if t.Cents > LargeCents {
			out.Collect(Alert{Account: t.Account, Small: small, Large: t.Seq})
		}
		d.clear(ctx)
	}
	if t.Cents < SmallCents {
		d.small.Update(t.Seq)
		at := ctx.TimerService().CurrentProcessingTime() + d.Window.Milliseconds()
		ctx.TimerService().RegisterProcessingTimeTimer(at)
		d.timer.Update(at)
	}
	return nil
}

// OnTimer forgets the small transaction once the window has passed.
func (d *Detector) OnTimer(ctx runnel.TimerContext[int64], _ int64, _ runnel.Collector[Alert]) error {
	d.small.Clear()
	d.timer.Clear()
	return nil
}

func (d *Detector) clear(ctx runnel.KeyedContext[int64]) {
	if at, ok := d.timer.Value(); ok {
		ctx.TimerService().DeleteProcessingTimeTimer(at)
	}
	d.small.Clear()
	d.timer.Clear()
}

// Generate returns transaction seq of source subtask. Each subtask has accounts accounts of its own (so
// each account's transactions stay in order); every fraudEvery-th account tests its card with a small
// amount and spends a large one at its next transaction, then tests it again and makes an ordinary
// purchase, which clears the flag: one alert per four transactions of such an account.
func Generate(accounts, fraudEvery int, subtask int, seq uint64) Transaction {
	local := int64(seq % uint64(accounts))
	round := seq / uint64(accounts)
	t := Transaction{Account: int64(subtask)*int64(accounts) + local, Seq: int64(seq),
		Cents: 1_000 + int64(run.Mix(uint64(subtask)<<40^seq)%40_000)}
	if fraudEvery > 0 && local%int64(fraudEvery) == 0 {
		t.Cents = [4]int64{50, 90_000, 90, 2_000}[round%4]
	}
	return t
}

// Job is a configured fraud detection run.
type Job struct {
	Records    uint64
	Accounts   int
	FraudEvery int
	Rate       float64
	Window     time.Duration
	alerts     *alertSink
}

// New registers the example's flags on fs (nil: none) and returns the job they configure.
func New(fs *pflag.FlagSet) *Job {
	j := &Job{Records: 1_000_000, Accounts: 10_000, FraudEvery: 97, Window: DefaultWindow}
	if fs != nil {
		fs.Uint64Var(&j.Records, "records", j.Records, "transactions to generate in total (0: unbounded)")
		fs.IntVar(&j.Accounts, "accounts", j.Accounts, "distinct accounts")
		fs.IntVar(&j.FraudEvery, "fraud-every", j.FraudEvery, "every N-th account tests a card and then spends (0: none)")
		fs.Float64Var(&j.Rate, "rate", 0, "transactions per second per source subtask (0: as fast as possible)")
		fs.DurationVar(&j.Window, "window", j.Window, "a large transaction this soon after a small one raises an alert")
	}
	return j
}

// Build adds the fraud detection pipeline to env.
func (j *Job) Build(env *runnel.Environment, _ run.Options) error {
	switch {
	case j.Accounts < 1:
		return fmt.Errorf("--accounts must be at least 1, got %d", j.Accounts)
	case j.FraudEvery < 0:
		return fmt.Errorf("--fraud-every must not be negative, got %d", j.FraudEvery)
	case j.Window < time.Millisecond:
		return fmt.Errorf("--window must be at least 1ms, got %s", j.Window)
	}
	accounts, every := j.Accounts, j.FraudEvery
	txs := runnel.FromSource(env, connector.Generator(func(subtask int, seq uint64) Transaction {
		return Generate(accounts, every, subtask, seq)
	}, connector.GeneratorOptions{TotalRecords: j.Records, RatePerSubtask: j.Rate})).
		Name("transactions").WithCodec(codec.MustStruct[Transaction]())
	return j.BuildOn(txs)
}

// BuildOn adds the detector and the alert sink to a stream of transactions.
func (j *Job) BuildOn(txs *runnel.Stream[Transaction]) error {
	window := j.Window
	alerts := runnel.Process(runnel.KeyBy(txs, func(t Transaction) int64 { return t.Account }),
		func() runnel.KeyedProcessFunction[int64, Transaction, Alert] { return &Detector{Window: window} }).
		Name("detector").WithCodec(codec.MustStruct[Alert]())
	j.alerts = &alertSink{}
	alerts.SinkTo(j.alerts).Name("alerts").SetParallelism(1)
	return nil
}

// Alerts returns the alerts raised, in arrival order.
func (j *Job) Alerts() []Alert {
	if j.alerts == nil {
		return nil
	}
	j.alerts.mu.Lock()
	defer j.alerts.mu.Unlock()
	return append([]Alert(nil), j.alerts.got...)
}

// Summary prints the number of alerts and the first few.
func (j *Job) Summary(w io.Writer, _ *runnel.JobResult) error {
	as := j.Alerts()
	fmt.Fprintf(w, "%d alerts (a transaction above $%d within %s of one below $%d on the same account)\n",
		len(as), LargeCents/100, j.Window, SmallCents/100)
	for _, a := range as[:min(5, len(as))] {
		fmt.Fprintf(w, "  account %6d: transaction %d after %d\n", a.Account, a.Large, a.Small)
	}
	return nil
}

// alertSink keeps the alerts in this process (the sink runs at parallelism 1).
type alertSink struct {
	mu  sync.Mutex
	got []Alert
}

func (s *alertSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[Alert], error) {
	return s, nil
}
func (s *alertSink) Write(a Alert) error {
	s.mu.Lock()
	s.got = append(s.got, a)
	s.mu.Unlock()
	return nil
}
func (s *alertSink) Flush() error { return nil }
func (s *alertSink) Close() error { return nil }
