// Package sessions is the sessionizer example: generated click events (user, page, event time), out of
// event-time order within a bound, are keyed by user and cut into event-time session windows (a session
// ends when more than --gap of event time passes without a click of its user); a process-window function
// emits one summary per session: its user, start (the first click), end (the last click plus the gap, the
// window's end), clicks and distinct pages.
//
//	clicks (watermarks --out-of-orderness behind) -> keyBy(user) -> sessions (session windows, process)
//	    -> summary (sink, parallelism 1), or --output FILE (JSON lines, exactly once)
//
// The generator is deterministic from --seed and does not depend on the parallelism: click i of the
// stream is at ClickSpacing × i minus a jitter of up to --out-of-orderness, and goes to source subtask
// i mod P. Users are active in some periods of 4 × --gap of event time and idle in others, so that their
// clicks form sessions.
package sessions

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// Click is one click event; Time is its event time in epoch milliseconds.
type Click struct {
	User int64
	Page int32
	Time int64
}

// Session is the summary of one user session: [Start, End) is its window (the first click, the last
// click plus the gap), Clicks its clicks and Pages the distinct pages among them.
type Session struct {
	User       int64
	Start, End int64
	Clicks     int64
	Pages      int64
}

// Line is the session as a JSON line (without the newline), as --output writes it.
func (s Session) Line() string {
	return fmt.Sprintf(`{"user":%d,"start":%d,"end":%d,"clicks":%d,"pages":%d}`, s.User, s.Start, s.End, s.Clicks, s.Pages)
}

// The generator's constants.
const (
	// ClickSpacing is the event time between two consecutive clicks of the stream (before the jitter).
	ClickSpacing = 10 * time.Millisecond
	// BaseTime is the event time of the stream's first click (before the jitter): 2026-01-01 UTC.
	BaseTime = int64(1_767_225_600_000)
	// Pages is the number of distinct pages.
	Pages = 50
	// DefaultGap is the session gap of --gap.
	DefaultGap = 30 * time.Second
	// DefaultOutOfOrderness is the bound of --out-of-orderness.
	DefaultOutOfOrderness = 5 * time.Second
)

// Generator makes the clicks of a seed, users, gap and out-of-orderness.
type Generator struct {
	Seed   uint64
	Users  int
	Gap    time.Duration
	Jitter time.Duration // how far a click may be out of event-time order
}

// active says whether user u clicks in activity period p (about a third of the users are, each period).
func (g Generator) active(u, p uint64) bool { return run.Mix(g.Seed^run.Mix(u<<32^p))%3 == 0 }

// Click returns click i of the stream.
func (g Generator) Click(i uint64) Click {
	h := run.Mix(g.Seed ^ run.Mix(i))
	at := BaseTime + int64(i)*ClickSpacing.Milliseconds()
	period := uint64(at / (4 * g.Gap.Milliseconds()))
	users := uint64(g.Users)
	// A random user, or the next one active in this period (the first drawn when none is).
	u := h % users
	for k := uint64(0); k < users; k++ {
		if g.active((h+k)%users, period) {
			u = (h + k) % users
			break
		}
	}
	return Click{
		User: int64(u),
		Page: int32((h >> 20) % Pages),
		Time: at - int64((h>>40)%uint64(g.Jitter.Milliseconds()+1)),
	}
}

// Job is a configured sessionizer run.
type Job struct {
	Records        uint64
	Users          int
	Gap            time.Duration
	OutOfOrderness time.Duration
	Seed           uint64
	Rate           float64
	// Output, if set, is the JSON lines file the sessions go to, exactly once (through a FileSink into
	// Output+".parts", joined into Output when the job ends); otherwise only the summary is kept.
	Output string

	fs      *pflag.FlagSet
	stats   *statsSink
	joined  bool
	lines   int64
	joinErr error
}

// New registers the example's flags on fs (nil: none) and returns the job they configure.
func New(fs *pflag.FlagSet) *Job {
	j := &Job{Records: 1_000_000, Users: 1000, Gap: DefaultGap, OutOfOrderness: DefaultOutOfOrderness, fs: fs}
	if fs != nil {
		fs.Uint64Var(&j.Records, "records", j.Records, "clicks to generate in total (0: unbounded, stop with --duration)")
		fs.IntVar(&j.Users, "users", j.Users, "distinct users")
		fs.DurationVar(&j.Gap, "gap", j.Gap, "a session ends when more than this much event time passes without a click of its user")
		fs.DurationVar(&j.OutOfOrderness, "out-of-orderness", j.OutOfOrderness, "how far clicks come out of event-time order (the watermark's bound)")
		fs.Uint64Var(&j.Seed, "seed", 0, "the generator's seed")
		fs.Float64Var(&j.Rate, "rate", 0, "clicks per second per source subtask (0: as fast as possible)")
		fs.StringVar(&j.Output, "output", "", "write the sessions to this file as JSON lines, exactly once with checkpoints (parts in FILE.parts until the job ends)")
	}
	return j
}

// Generator is the job's click generator.
func (j *Job) Generator() Generator {
	return Generator{Seed: j.Seed, Users: j.Users, Gap: j.Gap, Jitter: j.OutOfOrderness}
}

// Build adds the sessionizer to env.
func (j *Job) Build(env *runnel.Environment, opts run.Options) error {
	switch {
	case j.Users < 1:
		return fmt.Errorf("--users must be at least 1, got %d", j.Users)
	case j.Gap < time.Millisecond || j.Gap%time.Millisecond != 0:
		return fmt.Errorf("--gap must be whole milliseconds, at least 1ms, got %s", j.Gap)
	case j.OutOfOrderness < 0 || j.OutOfOrderness%time.Millisecond != 0:
		return fmt.Errorf("--out-of-orderness must be whole milliseconds, at least 0, got %s", j.OutOfOrderness)
	case j.Rate < 0:
		return fmt.Errorf("--rate must not be negative, got %v", j.Rate)
	}
	records := j.Records
	if opts.Duration > 0 && (j.fs == nil || !j.fs.Changed("records")) {
		records = 0
	}
	src := runnel.FromSource(env, &source{g: j.Generator(), opts: connector.GeneratorOptions{TotalRecords: records, RatePerSubtask: j.Rate}}).
		Name("clicks").WithCodec(codec.MustStruct[Click]())
	clicks := src.WithTimestamps(runnel.BoundedOutOfOrderness[Click](j.OutOfOrderness).
		WithTimestampAssigner(func(c Click, _ int64) int64 { return c.Time }))
	sessions := runnel.WindowProcess(runnel.Window(runnel.KeyBy(clicks, func(c Click) int64 { return c.User }),
		runnel.EventTimeSessionWindows(j.Gap)),
		func() runnel.ProcessWindowFunction[int64, Click, Session] { return &summarize{} }).
		Name("sessions").WithCodec(codec.MustStruct[Session]())
	if j.Output == "" {
		j.stats = &statsSink{}
		sessions.SinkTo(j.stats).Name("summary").SetParallelism(1)
		return nil
	}
	if err := run.CheckWritableFile(j.Output); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	if err := run.PrepareParts(j.Output, opts.Restoring); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	sessions.SinkTo(connector.FileSink(run.PartsDir(j.Output), Session.Line)).Name("output").SetParallelism(1)
	return nil
}

// source is a connector.Generator of the clicks: subtask s of P emits clicks s, s+P, s+2P, ..., so the
// stream does not depend on P, and each subtask's clicks are out of order by at most the jitter.
type source struct {
	g    Generator
	opts connector.GeneratorOptions
}

func (s *source) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[Click], error) {
	g, p := s.g, uint64(ctx.Parallelism())
	return connector.Generator(func(subtask int, seq uint64) Click { return g.Click(seq*p + uint64(subtask)) }, s.opts).CreateReader(ctx)
}

// summarize is the process-window function: one Session per window.
type summarize struct {
	runnel.ProcessWindowBase[int64]
	pages map[int32]struct{} // reused across windows
}

func (f *summarize) Process(ctx runnel.WindowContext[int64], cs []Click, out runnel.Collector[Session]) error {
	if f.pages == nil {
		f.pages = make(map[int32]struct{}, Pages)
	}
	clear(f.pages)
	for _, c := range cs {
		f.pages[c.Page] = struct{}{}
	}
	w := ctx.Window()
	out.Collect(Session{User: ctx.CurrentKey(), Start: w.Start, End: w.End, Clicks: int64(len(cs)), Pages: int64(len(f.pages))})
	return nil
}

// Stats sums sessions up for the summary.
type Stats struct {
	Sessions, Clicks, Pages int64
	Users                   map[int64]struct{}
	Longest                 Session // the longest in event time (the first such, by user and start)
}

// Add counts session s.
func (st *Stats) Add(s Session) {
	if st.Users == nil {
		st.Users = map[int64]struct{}{}
	}
	st.Sessions++
	st.Clicks += s.Clicks
	st.Pages += s.Pages
	st.Users[s.User] = struct{}{}
	l := st.Longest
	if d, ld := s.End-s.Start, l.End-l.Start; st.Sessions == 1 || d > ld ||
		(d == ld && cmp.Or(cmp.Compare(s.User, l.User), cmp.Compare(s.Start, l.Start)) < 0) {
		st.Longest = s
	}
}

// statsSink keeps the Stats of the sessions in this process (it runs at parallelism 1).
type statsSink struct {
	mu sync.Mutex
	st Stats
}

func (s *statsSink) CreateWriter(runnel.RuntimeContext) (runnel.SinkWriter[Session], error) {
	return s, nil
}
func (s *statsSink) Write(v Session) error {
	s.mu.Lock()
	s.st.Add(v)
	s.mu.Unlock()
	return nil
}
func (s *statsSink) Flush() error { return nil }
func (s *statsSink) Close() error { return nil }

// finish joins the committed sessions into --output once the job ended.
func (j *Job) finish(res *runnel.JobResult) {
	if j.joined || j.Output == "" {
		return
	}
	j.joined = true
	j.lines, j.joinErr = run.JoinParts(j.Output, res.Status == "FINISHED")
	if j.joinErr != nil {
		j.joinErr = fmt.Errorf("--output %s: %w", j.Output, j.joinErr)
	}
}

// Stats returns the sessions' Stats: those the summary sink saw, or those of the --output file once the
// job ended.
func (j *Job) Stats(res *runnel.JobResult) (Stats, error) {
	if j.Output == "" {
		if j.stats == nil {
			return Stats{}, errors.New("the job was not built")
		}
		j.stats.mu.Lock()
		defer j.stats.mu.Unlock()
		return j.stats.st, nil
	}
	j.finish(res)
	if j.joinErr != nil {
		return Stats{}, j.joinErr
	}
	b, err := os.ReadFile(j.Output)
	if err != nil {
		return Stats{}, err
	}
	var st Stats
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		var s Session
		if _, err := fmt.Sscanf(l, `{"user":%d,"start":%d,"end":%d,"clicks":%d,"pages":%d}`, &s.User, &s.Start, &s.End, &s.Clicks, &s.Pages); err != nil {
			return Stats{}, fmt.Errorf("--output %s: line %q: %w", j.Output, l, err)
		}
		st.Add(s)
	}
	return st, nil
}

// Summary prints the number of sessions, their averages and the longest.
func (j *Job) Summary(w io.Writer, res *runnel.JobResult) error {
	st, err := j.Stats(res)
	if err != nil {
		return err
	}
	where := ""
	if j.Output != "" {
		where = " written to " + j.Output
	}
	fmt.Fprintf(w, "%d sessions of %d users (%d clicks, gap %s)%s\n", st.Sessions, len(st.Users), st.Clicks, j.Gap, where)
	if st.Sessions == 0 {
		return nil
	}
	fmt.Fprintf(w, "  %.1f clicks on %.1f distinct pages per session on average\n",
		float64(st.Clicks)/float64(st.Sessions), float64(st.Pages)/float64(st.Sessions))
	l := st.Longest
	fmt.Fprintf(w, "  longest: user %d from %s for %s, %d clicks on %d pages\n", l.User,
		time.UnixMilli(l.Start).UTC().Format(time.RFC3339Nano), time.Duration(l.End-l.Start)*time.Millisecond, l.Clicks, l.Pages)
	return nil
}

// Verify fails the run when its sessions could not be joined into --output.
func (j *Job) Verify(res *runnel.JobResult) error {
	j.finish(res)
	return j.joinErr
}
