package scheduler

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// RestartStrategy decides whether and after how long a failed job restarts (Flink's
// RestartBackoffTimeStrategy). The caller reports each failure with NotifyFailure and then asks CanRestart
// and BackoffMillis about that failure. Time is the caller's: pass milliseconds from a monotonic clock; a
// time earlier than the previous failure's is treated as equal to it. A strategy is a state machine owned by
// one goroutine of the caller; it is not safe for concurrent use.
type RestartStrategy interface {
	// NotifyFailure records a failure at nowMillis. A cause wrapping ErrNonRecoverable forbids a restart.
	NotifyFailure(nowMillis int64, cause error)
	// CanRestart reports whether the job may restart after the latest failure.
	CanRestart() bool
	// BackoffMillis is how long to wait after the latest failure before restarting.
	BackoffMillis() int64
}

// ErrNonRecoverable marks a failure that no restart can fix (a configuration or programming error that would
// fail again the same way). Wrap it into a cause, for example fmt.Errorf("...: %w", ErrNonRecoverable), and
// every restart strategy refuses to restart after that failure.
var ErrNonRecoverable = errors.New("non-recoverable failure")

// Random is a source of uniformly distributed numbers in [0, 1) for jitter; *math/rand/v2.Rand is one. The
// package draws from it only inside NotifyFailure of an exponential-delay strategy with jitter.
type Random interface {
	Float64() float64
}

// RestartKind names a restart strategy.
type RestartKind uint8

const (
	// NoRestart never restarts: the first failure fails the job.
	NoRestart RestartKind = iota + 1
	// FixedDelayRestart restarts after Delay, at most Attempts times over the job's life.
	FixedDelayRestart
	// ExponentialDelayRestart restarts after a backoff that starts at InitialBackoff and is multiplied by
	// Multiplier after each failure up to MaxBackoff, with ±Jitter of randomness. A failure at least
	// ResetThreshold after the previous one resets the backoff (and the attempt count) to the start.
	// Attempts, when not 0, limits the restarts between resets. The first Immediate restarts after a reset
	// (the first failures of a burst) wait no time at all; the backoff applies from the next failure on, so
	// that a job that fails now and then recovers at once and only one that keeps failing is slowed down.
	ExponentialDelayRestart
	// FailureRateRestart restarts after Delay as long as at most MaxFailures failures fall within any
	// Interval; the failure that makes it MaxFailures+1 fails the job.
	FailureRateRestart
)

// String returns the kind's name as written in a restart strategy spec: "none", "fixed-delay",
// "exponential-delay" or "failure-rate".
func (k RestartKind) String() string {
	switch k {
	case NoRestart:
		return "none"
	case FixedDelayRestart:
		return "fixed-delay"
	case ExponentialDelayRestart:
		return "exponential-delay"
	case FailureRateRestart:
		return "failure-rate"
	}
	return fmt.Sprintf("restart-kind(%d)", uint8(k))
}

// keys lists the spec keys of the kind, in the order String writes them.
func (k RestartKind) keys() []string {
	switch k {
	case FixedDelayRestart:
		return []string{"attempts", "delay"}
	case ExponentialDelayRestart:
		return []string{"initial", "max", "multiplier", "reset", "jitter", "attempts", "immediate"}
	case FailureRateRestart:
		return []string{"max-failures", "interval", "delay"}
	}
	return nil
}

// RestartConfig configures a restart strategy. Only the fields of its Kind are used; DefaultRestartConfig
// fills them with Flink's defaults.
type RestartConfig struct {
	Kind RestartKind
	// Attempts (spec key "attempts"): for fixed-delay the number of restarts over the job's life (at least
	// 1); for exponential-delay the number of restarts before the backoff resets, 0 meaning unlimited.
	Attempts int
	// Delay (spec key "delay"): the wait before each restart of fixed-delay and failure-rate.
	Delay time.Duration
	// InitialBackoff (spec key "initial"): exponential-delay's first backoff, more than 0.
	InitialBackoff time.Duration
	// MaxBackoff (spec key "max"): exponential-delay's largest backoff, jitter included; at least
	// InitialBackoff.
	MaxBackoff time.Duration
	// Multiplier (spec key "multiplier"): exponential-delay's growth per failure, at least 1.
	Multiplier float64
	// ResetThreshold (spec key "reset"): a failure this long or longer after the previous one resets
	// exponential-delay's backoff and attempt count; more than 0.
	ResetThreshold time.Duration
	// Jitter (spec key "jitter"): exponential-delay's backoff varies uniformly by up to this fraction of
	// itself either way; 0 to 1.
	Jitter float64
	// MaxFailures (spec key "max-failures"): failure-rate's allowed failures per Interval, at least 1.
	MaxFailures int
	// Interval (spec key "interval"): failure-rate's window, more than 0.
	Interval time.Duration
	// Immediate (spec key "immediate"): exponential-delay's restarts after a reset (the first failure, and a
	// failure at least ResetThreshold after the previous one) that happen at once, without backoff; the
	// failure after them waits InitialBackoff, and the backoff grows from there. 0 (Flink's behaviour)
	// backs off from the first failure on.
	Immediate int
}

// DefaultRestartConfig returns the configuration of kind with Flink's defaults: fixed-delay attempts=1,
// delay=1s; exponential-delay initial=1s, max=1m, multiplier=1.5, reset=1h, jitter=0.1, attempts unlimited,
// immediate=0; failure-rate max-failures=1, interval=1m, delay=1s.
func DefaultRestartConfig(kind RestartKind) RestartConfig {
	c := RestartConfig{Kind: kind}
	switch kind {
	case FixedDelayRestart:
		c.Attempts, c.Delay = 1, time.Second
	case ExponentialDelayRestart:
		c.InitialBackoff, c.MaxBackoff, c.Multiplier = time.Second, time.Minute, 1.5
		c.ResetThreshold, c.Jitter = time.Hour, 0.1
	case FailureRateRestart:
		c.MaxFailures, c.Interval, c.Delay = 1, time.Minute, time.Second
	}
	return c
}

// String formats the configuration as a spec that ParseRestartStrategy reads back to the same value, with
// every key of its kind: "fixed-delay:attempts=3,delay=1s".
func (c RestartConfig) String() string {
	keys := c.Kind.keys()
	if len(keys) == 0 {
		return c.Kind.String()
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+c.value(k))
	}
	return c.Kind.String() + ":" + strings.Join(parts, ",")
}

func (c RestartConfig) value(key string) string {
	switch key {
	case "attempts":
		return strconv.Itoa(c.Attempts)
	case "delay":
		return formatDuration(c.Delay)
	case "initial":
		return formatDuration(c.InitialBackoff)
	case "max":
		return formatDuration(c.MaxBackoff)
	case "multiplier":
		return strconv.FormatFloat(c.Multiplier, 'g', -1, 64)
	case "reset":
		return formatDuration(c.ResetThreshold)
	case "jitter":
		return strconv.FormatFloat(c.Jitter, 'g', -1, 64)
	case "max-failures":
		return strconv.Itoa(c.MaxFailures)
	case "interval":
		return formatDuration(c.Interval)
	case "immediate":
		return strconv.Itoa(c.Immediate)
	}
	return ""
}

// formatDuration writes d in its largest whole unit ("1m" rather than "1m0s"); time.ParseDuration reads it.
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d != 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

// Validate checks the fields of the configuration's kind, with messages that name the spec key and the fix.
func (c RestartConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("restart strategy %s: "+format, append([]any{c.Kind}, args...)...)
	}
	switch c.Kind {
	case NoRestart:
	case FixedDelayRestart:
		if c.Attempts < 1 {
			return bad("attempts must be at least 1, got %d (use \"none\" to disable restarts)", c.Attempts)
		}
		if c.Delay < 0 {
			return bad("delay must not be negative, got %s", c.Delay)
		}
	case ExponentialDelayRestart:
		if c.InitialBackoff <= 0 {
			return bad("initial must be more than 0, got %s", c.InitialBackoff)
		}
		if c.MaxBackoff < c.InitialBackoff {
			return bad("max (%s) must be at least initial (%s)", c.MaxBackoff, c.InitialBackoff)
		}
		if !(c.Multiplier >= 1) || math.IsInf(c.Multiplier, 0) {
			return bad("multiplier must be a finite number of at least 1, got %v", c.Multiplier)
		}
		if c.ResetThreshold <= 0 {
			return bad("reset must be more than 0, got %s", c.ResetThreshold)
		}
		if !(c.Jitter >= 0 && c.Jitter <= 1) {
			return bad("jitter must be between 0 and 1, got %v", c.Jitter)
		}
		if c.Attempts < 0 {
			return bad("attempts must not be negative, got %d (0 means unlimited)", c.Attempts)
		}
		if c.Immediate < 0 {
			return bad("immediate must not be negative, got %d (0 backs off from the first failure on)", c.Immediate)
		}
	case FailureRateRestart:
		if c.MaxFailures < 1 {
			return bad("max-failures must be at least 1, got %d (use \"none\" to disable restarts)", c.MaxFailures)
		}
		if c.Interval <= 0 {
			return bad("interval must be more than 0, got %s", c.Interval)
		}
		if c.Delay < 0 {
			return bad("delay must not be negative, got %s", c.Delay)
		}
	default:
		return fmt.Errorf("restart strategy is not set (kind %d): valid strategies are none, fixed-delay, exponential-delay, failure-rate", uint8(c.Kind))
	}
	return nil
}

// ParseRestartStrategy reads a restart strategy spec as given on the command line: a strategy name,
// optionally followed by a colon and comma-separated key=value pairs. Keys left out keep the defaults of
// DefaultRestartConfig; durations take Go units ("500ms", "1s", "1m"). Examples:
//
//	none
//	fixed-delay:attempts=3,delay=1s
//	exponential-delay:initial=100ms,max=10s,multiplier=2,reset=1m,jitter=0.1,attempts=10
//	exponential-delay:immediate=1,initial=100ms,max=10s   (first restart of a burst at once)
//	failure-rate:max-failures=3,interval=1m,delay=1s
//
// Flink's spellings "off", "disable", "fixeddelay", "exponentialdelay" and "failurerate" are accepted too.
// Errors name the bad key or value and list the valid ones.
func ParseRestartStrategy(spec string) (RestartConfig, error) {
	name, params, hasParams := strings.Cut(strings.TrimSpace(spec), ":")
	name = strings.ToLower(strings.TrimSpace(name))
	var kind RestartKind
	switch name {
	case "none", "off", "disable":
		kind = NoRestart
	case "fixed-delay", "fixeddelay":
		kind = FixedDelayRestart
	case "exponential-delay", "exponentialdelay":
		kind = ExponentialDelayRestart
	case "failure-rate", "failurerate":
		kind = FailureRateRestart
	default:
		return RestartConfig{}, fmt.Errorf("unknown restart strategy %q in %q: valid strategies are none, fixed-delay, exponential-delay, failure-rate", name, spec)
	}
	c := DefaultRestartConfig(kind)
	params = strings.TrimSpace(params)
	if !hasParams || params == "" {
		return c, c.Validate()
	}
	valid := kind.keys()
	if len(valid) == 0 {
		return RestartConfig{}, fmt.Errorf("restart strategy %s takes no parameters, got %q", kind, params)
	}
	seen := make(map[string]bool)
	for _, kv := range strings.Split(params, ",") {
		key, val, ok := strings.Cut(kv, "=")
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		if !ok || key == "" || val == "" {
			return RestartConfig{}, fmt.Errorf("restart strategy %s: parameter %q is not key=value: write for example %s=%s (valid keys: %s)",
				kind, strings.TrimSpace(kv), valid[0], c.value(valid[0]), strings.Join(valid, ", "))
		}
		if !contains(valid, key) {
			return RestartConfig{}, fmt.Errorf("restart strategy %s: unknown key %q: valid keys are %s", kind, key, strings.Join(valid, ", "))
		}
		if seen[key] {
			return RestartConfig{}, fmt.Errorf("restart strategy %s: key %q is given twice", kind, key)
		}
		seen[key] = true
		if err := c.set(key, val); err != nil {
			return RestartConfig{}, fmt.Errorf("restart strategy %s: %w", kind, err)
		}
	}
	return c, c.Validate()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (c *RestartConfig) set(key, val string) error {
	integer := func(dst *int) error {
		n, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("%s=%q is not a whole number", key, val)
		}
		*dst = n
		return nil
	}
	float := func(dst *float64) error {
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("%s=%q is not a number", key, val)
		}
		*dst = f
		return nil
	}
	duration := func(dst *time.Duration) error {
		d, err := time.ParseDuration(val)
		if err != nil {
			return fmt.Errorf("%s=%q is not a duration: write a number with a unit, such as 500ms, 1s or 2m", key, val)
		}
		*dst = d
		return nil
	}
	switch key {
	case "attempts":
		return integer(&c.Attempts)
	case "delay":
		return duration(&c.Delay)
	case "initial":
		return duration(&c.InitialBackoff)
	case "max":
		return duration(&c.MaxBackoff)
	case "multiplier":
		return float(&c.Multiplier)
	case "reset":
		return duration(&c.ResetThreshold)
	case "jitter":
		return float(&c.Jitter)
	case "max-failures":
		return integer(&c.MaxFailures)
	case "interval":
		return duration(&c.Interval)
	case "immediate":
		return integer(&c.Immediate)
	}
	return fmt.Errorf("unknown key %q", key)
}

// NewRestartStrategy builds the restart strategy cfg describes. random supplies exponential-delay's jitter
// and is required only when cfg.Jitter is more than 0.
func NewRestartStrategy(cfg RestartConfig, random Random) (RestartStrategy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var s RestartStrategy
	switch cfg.Kind {
	case NoRestart:
		s = noRestart{}
	case FixedDelayRestart:
		s = &fixedDelay{attempts: cfg.Attempts, delayMillis: cfg.Delay.Milliseconds()}
	case ExponentialDelayRestart:
		if cfg.Jitter > 0 && random == nil {
			return nil, fmt.Errorf("restart strategy %s: jitter=%v needs a random source; pass one or set jitter=0", cfg.Kind, cfg.Jitter)
		}
		s = &exponentialDelay{
			initialMillis: float64(cfg.InitialBackoff) / float64(time.Millisecond),
			maxMillis:     float64(cfg.MaxBackoff) / float64(time.Millisecond),
			multiplier:    cfg.Multiplier, jitter: cfg.Jitter, resetMillis: cfg.ResetThreshold.Milliseconds(),
			maxAttempts: cfg.Attempts, immediate: cfg.Immediate, random: random,
		}
	case FailureRateRestart:
		s = &failureRate{maxFailures: cfg.MaxFailures, intervalMillis: cfg.Interval.Milliseconds(), delayMillis: cfg.Delay.Milliseconds()}
	}
	return &guarded{inner: s}, nil
}

// guarded refuses restarts after a failure whose cause wraps ErrNonRecoverable, and otherwise defers to the
// strategy it wraps (which still counts the failure).
type guarded struct {
	inner       RestartStrategy
	unrecovered bool
}

func (g *guarded) NotifyFailure(nowMillis int64, cause error) {
	g.unrecovered = errors.Is(cause, ErrNonRecoverable)
	g.inner.NotifyFailure(nowMillis, cause)
}

func (g *guarded) CanRestart() bool { return !g.unrecovered && g.inner.CanRestart() }

func (g *guarded) BackoffMillis() int64 { return g.inner.BackoffMillis() }

type noRestart struct{}

func (noRestart) NotifyFailure(int64, error) {}
func (noRestart) CanRestart() bool           { return false }
func (noRestart) BackoffMillis() int64       { return 0 }

type fixedDelay struct {
	attempts    int
	delayMillis int64
	failures    int
}

func (f *fixedDelay) NotifyFailure(int64, error) {
	if f.failures <= f.attempts { // saturate: one past the limit is enough to refuse
		f.failures++
	}
}

func (f *fixedDelay) CanRestart() bool { return f.failures <= f.attempts }

func (f *fixedDelay) BackoffMillis() int64 { return f.delayMillis }

type exponentialDelay struct {
	initialMillis, maxMillis float64
	multiplier, jitter       float64
	resetMillis              int64
	maxAttempts              int // 0: unlimited
	immediate                int // restarts after a reset without backoff
	random                   Random

	seen       bool
	lastMillis int64
	baseMillis float64 // backoff before jitter of the latest backed-off failure
	backoff    int64
	attempts   int // failures since the last reset, this one included
	burst      int // failures since the last reset, this one included, counted up to immediate+2
}

func (x *exponentialDelay) NotifyFailure(nowMillis int64, _ error) {
	if x.seen && nowMillis < x.lastMillis {
		nowMillis = x.lastMillis
	}
	if !x.seen || nowMillis-x.lastMillis >= x.resetMillis {
		x.attempts, x.burst = 1, 1
	} else {
		if x.attempts <= x.maxAttempts { // count up to one past the limit; unlimited needs no count
			x.attempts++
		}
		if x.burst <= x.immediate+1 { // saturate: past the first backed-off failure the count no longer matters
			x.burst++
		}
	}
	x.seen, x.lastMillis = true, nowMillis
	switch {
	case x.burst <= x.immediate:
		// One of the first failures of a burst: restart at once. No jitter is drawn: there is nothing to
		// spread.
		x.backoff = 0
		return
	case x.burst == x.immediate+1:
		x.baseMillis = x.initialMillis
	default:
		x.baseMillis = math.Min(x.baseMillis*x.multiplier, x.maxMillis)
	}
	b := x.baseMillis
	if x.jitter > 0 {
		b += x.baseMillis * x.jitter * (2*x.random.Float64() - 1)
	}
	x.backoff = int64(math.Round(math.Max(0, math.Min(b, x.maxMillis))))
}

func (x *exponentialDelay) CanRestart() bool {
	return x.maxAttempts == 0 || x.attempts <= x.maxAttempts
}

func (x *exponentialDelay) BackoffMillis() int64 { return x.backoff }

type failureRate struct {
	maxFailures    int
	intervalMillis int64
	delayMillis    int64
	// times holds the latest failures, oldest first, at most maxFailures+1 of them.
	times []int64
}

func (f *failureRate) NotifyFailure(nowMillis int64, _ error) {
	if n := len(f.times); n > 0 && nowMillis < f.times[n-1] {
		nowMillis = f.times[n-1]
	}
	if len(f.times) == f.maxFailures+1 {
		copy(f.times, f.times[1:])
		f.times = f.times[:len(f.times)-1]
	}
	f.times = append(f.times, nowMillis)
}

// CanRestart allows the restart unless the latest failure is the (maxFailures+1)th within an interval: the
// window [latest-interval, latest] includes both ends.
func (f *failureRate) CanRestart() bool {
	n := len(f.times)
	if n <= f.maxFailures {
		return true
	}
	return f.times[n-1]-f.times[0] > f.intervalMillis
}

func (f *failureRate) BackoffMillis() int64 { return f.delayMillis }

// DefaultRestartWithCheckpoints is the restart strategy of a checkpointed job without an explicit one: the
// first failure after a quiet minute restarts at once (immediate=1), the next ones back off from 100 ms,
// doubling up to 10 s, with 10% jitter.
const DefaultRestartWithCheckpoints = "exponential-delay:initial=100ms,max=10s,multiplier=2,reset=1m,jitter=0.1,immediate=1"
