package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseRestartStrategy(t *testing.T) {
	fixed := func(attempts int, delay time.Duration) RestartConfig {
		return RestartConfig{Kind: FixedDelayRestart, Attempts: attempts, Delay: delay}
	}
	exp := func(initial, maxB time.Duration, mult float64, reset time.Duration, jitter float64, attempts int) RestartConfig {
		return RestartConfig{Kind: ExponentialDelayRestart, InitialBackoff: initial, MaxBackoff: maxB, Multiplier: mult, ResetThreshold: reset, Jitter: jitter, Attempts: attempts}
	}
	rate := func(maxF int, interval, delay time.Duration) RestartConfig {
		return RestartConfig{Kind: FailureRateRestart, MaxFailures: maxF, Interval: interval, Delay: delay}
	}
	cases := []struct {
		spec string
		want RestartConfig
		err  string // substring; empty for success
	}{
		{spec: "none", want: RestartConfig{Kind: NoRestart}},
		{spec: "off", want: RestartConfig{Kind: NoRestart}},
		{spec: " None ", want: RestartConfig{Kind: NoRestart}},
		{spec: "none:", want: RestartConfig{Kind: NoRestart}},
		{spec: "fixed-delay", want: fixed(1, time.Second)},
		{spec: "fixed-delay:attempts=3,delay=1s", want: fixed(3, time.Second)},
		{spec: "fixeddelay: delay = 250ms , attempts = 10", want: fixed(10, 250*time.Millisecond)},
		{spec: "fixed-delay:delay=0s", want: fixed(1, 0)},
		{spec: "exponential-delay", want: exp(time.Second, time.Minute, 1.5, time.Hour, 0.1, 0)},
		{spec: "exponential-delay:initial=100ms,max=10s,multiplier=2,reset=1m,jitter=0.1", want: exp(100*time.Millisecond, 10*time.Second, 2, time.Minute, 0.1, 0)},
		{spec: "exponential-delay:initial=100ms,max=10s,jitter=0,attempts=5", want: exp(100*time.Millisecond, 10*time.Second, 1.5, time.Hour, 0, 5)},
		{spec: "exponential-delay:immediate=2,initial=100ms", want: func() RestartConfig {
			c := exp(100*time.Millisecond, time.Minute, 1.5, time.Hour, 0.1, 0)
			c.Immediate = 2
			return c
		}()},
		{spec: "failure-rate", want: rate(1, time.Minute, time.Second)},
		{spec: "failure-rate:max-failures=3,interval=1m,delay=1s", want: rate(3, time.Minute, time.Second)},
		{spec: "failurerate:interval=30s", want: rate(1, 30*time.Second, time.Second)},

		{spec: "", err: `unknown restart strategy "" in "": valid strategies are none, fixed-delay, exponential-delay, failure-rate`},
		{spec: "fixed", err: `unknown restart strategy "fixed"`},
		{spec: "none:attempts=1", err: `restart strategy none takes no parameters, got "attempts=1"`},
		{spec: "fixed-delay:attempts", err: `parameter "attempts" is not key=value: write for example attempts=1 (valid keys: attempts, delay)`},
		{spec: "fixed-delay:attempts=", err: `parameter "attempts=" is not key=value`},
		{spec: "fixed-delay:attempts=3,", err: `parameter "" is not key=value`},
		{spec: "fixed-delay:=3", err: `parameter "=3" is not key=value`},
		{spec: "fixed-delay:tries=3", err: `restart strategy fixed-delay: unknown key "tries": valid keys are attempts, delay`},
		{spec: "fixed-delay:interval=1s", err: `unknown key "interval": valid keys are attempts, delay`},
		{spec: "fixed-delay:attempts=3,attempts=4", err: `key "attempts" is given twice`},
		{spec: "fixed-delay:attempts=three", err: `restart strategy fixed-delay: attempts="three" is not a whole number`},
		{spec: "fixed-delay:delay=5", err: `delay="5" is not a duration: write a number with a unit, such as 500ms, 1s or 2m`},
		{spec: "fixed-delay:attempts=0", err: `restart strategy fixed-delay: attempts must be at least 1, got 0 (use "none" to disable restarts)`},
		{spec: "fixed-delay:delay=-1s", err: `delay must not be negative, got -1s`},
		{spec: "exponential-delay:max=10s,min=1s", err: `unknown key "min": valid keys are initial, max, multiplier, reset, jitter, attempts, immediate`},
		{spec: "exponential-delay:immediate=-1", err: `immediate must not be negative, got -1 (0 backs off from the first failure on)`},
		{spec: "exponential-delay:immediate=yes", err: `immediate="yes" is not a whole number`},
		{spec: "exponential-delay:initial=0s", err: `initial must be more than 0, got 0s`},
		{spec: "exponential-delay:initial=2m", err: `max (1m0s) must be at least initial (2m0s)`},
		{spec: "exponential-delay:multiplier=0.5", err: `multiplier must be a finite number of at least 1, got 0.5`},
		{spec: "exponential-delay:multiplier=NaN", err: `multiplier must be a finite number of at least 1, got NaN`},
		{spec: "exponential-delay:multiplier=+Inf", err: `multiplier must be a finite number of at least 1, got +Inf`},
		{spec: "exponential-delay:multiplier=x", err: `multiplier="x" is not a number`},
		{spec: "exponential-delay:reset=0s", err: `reset must be more than 0, got 0s`},
		{spec: "exponential-delay:jitter=1.5", err: `jitter must be between 0 and 1, got 1.5`},
		{spec: "exponential-delay:jitter=-0.1", err: `jitter must be between 0 and 1, got -0.1`},
		{spec: "exponential-delay:attempts=-1", err: `attempts must not be negative, got -1 (0 means unlimited)`},
		{spec: "failure-rate:max-failures=0", err: `restart strategy failure-rate: max-failures must be at least 1, got 0`},
		{spec: "failure-rate:interval=0s", err: `interval must be more than 0, got 0s`},
		{spec: "failure-rate:delay=-5ms", err: `delay must not be negative, got -5ms`},
		{spec: "failure-rate:attempts=3", err: `unknown key "attempts": valid keys are max-failures, interval, delay`},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := ParseRestartStrategy(tc.spec)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			// The canonical spec reads back to the same configuration.
			again, err := ParseRestartStrategy(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip through %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestRestartConfigString(t *testing.T) {
	for _, tc := range []struct {
		cfg  RestartConfig
		want string
	}{
		{DefaultRestartConfig(NoRestart), "none"},
		{DefaultRestartConfig(FixedDelayRestart), "fixed-delay:attempts=1,delay=1s"},
		{DefaultRestartConfig(ExponentialDelayRestart), "exponential-delay:initial=1s,max=1m,multiplier=1.5,reset=1h,jitter=0.1,attempts=0,immediate=0"},
		{DefaultRestartConfig(FailureRateRestart), "failure-rate:max-failures=1,interval=1m,delay=1s"},
		{RestartConfig{Kind: FixedDelayRestart, Attempts: 2, Delay: 1500 * time.Millisecond}, "fixed-delay:attempts=2,delay=1500ms"},
		{RestartConfig{Kind: FixedDelayRestart, Attempts: 2, Delay: 1500 * time.Microsecond}, "fixed-delay:attempts=2,delay=1.5ms"},
		{RestartConfig{Kind: FixedDelayRestart, Attempts: 2}, "fixed-delay:attempts=2,delay=0s"},
	} {
		if got := tc.cfg.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
	for _, k := range []RestartKind{NoRestart, FixedDelayRestart, ExponentialDelayRestart, FailureRateRestart} {
		cfg := DefaultRestartConfig(k)
		if err := cfg.Validate(); err != nil {
			t.Errorf("default %s: %v", k, err)
		}
		if back, err := ParseRestartStrategy(cfg.String()); err != nil || back != cfg {
			t.Errorf("default %s does not round-trip through %q: %+v, %v", k, cfg.String(), back, err)
		}
		if back, err := ParseRestartStrategy(k.String()); err != nil || back != cfg {
			t.Errorf("%q does not give the defaults: %+v, %v", k.String(), back, err)
		}
	}
	if err := (RestartConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "restart strategy is not set") {
		t.Errorf("zero config: %v", err)
	}
	if _, err := NewRestartStrategy(RestartConfig{Kind: 42}, nil); err == nil {
		t.Error("unknown kind accepted")
	}
	if s := RestartKind(42).String(); s != "restart-kind(42)" {
		t.Errorf("String = %q", s)
	}
}

// fakeRandom returns its values in turn and fails the test when they run out.
type fakeRandom struct {
	t      *testing.T
	values []float64
}

func (f *fakeRandom) Float64() float64 {
	if len(f.values) == 0 {
		f.t.Fatal("random source drawn more often than expected")
	}
	v := f.values[0]
	f.values = f.values[1:]
	return v
}

// step is one failure: its time and cause, and what the strategy must answer about it.
type step struct {
	now     int64
	cause   error
	restart bool
	backoff int64
}

func TestRestartStrategies(t *testing.T) {
	boom := errors.New("boom")
	fatal := fmt.Errorf("operator open: %w", ErrNonRecoverable)
	cases := []struct {
		name   string
		spec   string
		random []float64
		steps  []step
	}{
		{"none", "none", nil, []step{{0, boom, false, 0}, {1000, boom, false, 0}}},

		{"fixed-delay counts every failure", "fixed-delay:attempts=2,delay=1s", nil, []step{
			{0, boom, true, 1000}, {100_000, boom, true, 1000}, {200_000_000, boom, false, 1000}, {300_000_000, boom, false, 1000},
		}},
		{"fixed-delay zero delay", "fixed-delay:attempts=1,delay=0s", nil, []step{{5, nil, true, 0}, {6, nil, false, 0}}},
		{"fixed-delay non-recoverable cause", "fixed-delay:attempts=3,delay=10ms", nil, []step{
			{0, fatal, false, 10}, {1, boom, true, 10}, {2, boom, true, 10}, {3, boom, false, 10},
		}},

		{"failure-rate within the interval", "failure-rate:max-failures=2,interval=10s,delay=500ms", nil, []step{
			{0, boom, true, 500}, {1000, boom, true, 500}, {5000, boom, false, 500},
		}},
		{"failure-rate window slides", "failure-rate:max-failures=2,interval=10s,delay=500ms", nil, []step{
			{0, boom, true, 500},
			{1000, boom, true, 500},
			{11_000, boom, true, 500},  // window [1000, 11000]: 1000 and 11000
			{11_001, boom, true, 500},  // window [1001, 11001]: 11000 and 11001
			{12_000, boom, false, 500}, // window [2000, 12000]: 11000, 11001, 12000
			{30_000, boom, true, 500},
		}},
		{"failure-rate window includes both ends", "failure-rate:max-failures=2,interval=10s,delay=0s", nil, []step{
			{0, boom, true, 0}, {0, boom, true, 0}, {10_000, boom, false, 0}, {20_001, boom, true, 0},
		}},
		{"failure-rate single failure allowed", "failure-rate:max-failures=1,interval=1m,delay=1s", nil, []step{
			{0, boom, true, 1000}, {60_000, boom, false, 1000}, {120_001, boom, true, 1000},
		}},
		{"failure-rate time going backwards counts as no time", "failure-rate:max-failures=1,interval=10s,delay=1s", nil, []step{
			{50_000, boom, true, 1000}, {10_000, boom, false, 1000}, {60_001, boom, true, 1000},
		}},
		{"failure-rate non-recoverable", "failure-rate:max-failures=5,interval=1s,delay=1s", nil, []step{
			{0, boom, true, 1000}, {10, fatal, false, 1000},
		}},

		{"exponential grows to max and resets", "exponential-delay:initial=100ms,max=1s,multiplier=2,reset=1m,jitter=0", nil, []step{
			{0, boom, true, 100},
			{10, boom, true, 200},
			{20, boom, true, 400},
			{30, boom, true, 800},
			{40, boom, true, 1000},
			{50, boom, true, 1000},
			{60_049, boom, true, 1000}, // 59999 ms since the last failure: no reset
			{120_049, boom, true, 100}, // 60000 ms: reset
			{120_050, boom, true, 200},
		}},
		{"exponential attempts reset with the backoff", "exponential-delay:initial=1s,max=1m,multiplier=3,reset=10s,jitter=0,attempts=2", nil, []step{
			{0, boom, true, 1000},
			{2000, boom, true, 3000},
			{4000, boom, false, 9000},
			{6000, boom, false, 27000},
			{16_000, boom, true, 1000},
		}},
		{"exponential fractional multiplier rounds to milliseconds", "exponential-delay:initial=1ms,max=1s,multiplier=1.5,reset=1h,jitter=0", nil, []step{
			{0, boom, true, 1}, {1, boom, true, 2}, {2, boom, true, 2}, {3, boom, true, 3}, {4, boom, true, 5},
		}},
		{"exponential jitter", "exponential-delay:initial=100ms,max=1s,multiplier=2,reset=1m,jitter=0.1", []float64{0, 0.5, 0.75, 0.999, 0.999, 0}, []step{
			{0, boom, true, 90},   // 100 - 10
			{1, boom, true, 200},  // 200 exactly
			{2, boom, true, 420},  // 400 + 20
			{3, boom, true, 880},  // 800 + 79.84
			{4, boom, true, 1000}, // 1000 + 99.8, capped at max
			{5, boom, true, 900},  // 1000 - 100
		}},
		{"exponential huge multiplier stays at max", "exponential-delay:initial=1ms,max=1h,multiplier=1e300,reset=1h,jitter=0", nil, []step{
			{0, boom, true, 1}, {1, boom, true, 3_600_000}, {2, boom, true, 3_600_000}, {3, boom, true, 3_600_000},
		}},
		{"exponential time going backwards does not reset", "exponential-delay:initial=100ms,max=1s,multiplier=2,reset=1s,jitter=0", nil, []step{
			{5000, boom, true, 100}, {0, boom, true, 200}, {5999, boom, true, 400}, {6999, boom, true, 100},
		}},
		{"exponential immediate first restart, then backoff, reset makes it immediate again", "exponential-delay:immediate=1,initial=100ms,max=1s,multiplier=2,reset=1m,jitter=0", nil, []step{
			{0, boom, true, 0},
			{10, boom, true, 100},
			{20, boom, true, 200},
			{30, boom, true, 400},
			{60_029, boom, true, 800}, // 59999 ms since the last failure: still the same burst
			{120_029, boom, true, 0},  // 60000 ms: a new burst restarts at once
			{120_030, boom, true, 100},
		}},
		{"exponential several immediate restarts count as attempts", "exponential-delay:immediate=2,initial=1s,max=1m,multiplier=2,reset=10s,jitter=0,attempts=3", nil, []step{
			{0, boom, true, 0}, {1, boom, true, 0}, {2, boom, true, 1000}, {3, boom, false, 2000}, {20_000, boom, true, 0},
		}},
		{"exponential immediate restarts draw no jitter", "exponential-delay:immediate=1,initial=100ms,max=1s,multiplier=2,reset=1m,jitter=0.5", []float64{1 - 1e-9, 0}, []step{
			{0, boom, true, 0}, {1, boom, true, 150}, {2, boom, true, 100},
		}},
		{"exponential non-recoverable", "exponential-delay:initial=100ms,max=1s,multiplier=2,reset=1s,jitter=0", nil, []step{
			{0, boom, true, 100}, {1, fatal, false, 200}, {2, nil, true, 400},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseRestartStrategy(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			var random Random
			if tc.random != nil {
				random = &fakeRandom{t: t, values: tc.random}
			}
			s, err := NewRestartStrategy(cfg, random)
			if err != nil {
				t.Fatal(err)
			}
			if tc.spec != "none" && !s.CanRestart() {
				t.Fatal("refuses a restart before any failure")
			}
			for i, st := range tc.steps {
				s.NotifyFailure(st.now, st.cause)
				if got := s.CanRestart(); got != st.restart {
					t.Errorf("failure %d at %d ms: CanRestart = %v, want %v", i+1, st.now, got, st.restart)
				}
				if got := s.BackoffMillis(); got != st.backoff {
					t.Errorf("failure %d at %d ms: BackoffMillis = %d, want %d", i+1, st.now, got, st.backoff)
				}
			}
			if f, ok := random.(*fakeRandom); ok && len(f.values) > 0 {
				t.Errorf("%d random values left over", len(f.values))
			}
		})
	}
}

func TestExponentialJitterNeedsRandom(t *testing.T) {
	cfg, err := ParseRestartStrategy("exponential-delay:jitter=0.2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRestartStrategy(cfg, nil); err == nil || !strings.Contains(err.Error(), "jitter=0.2 needs a random source") {
		t.Fatalf("error %v", err)
	}
	cfg.Jitter = 0
	if _, err := NewRestartStrategy(cfg, nil); err != nil {
		t.Fatal(err)
	}
}

// TestExponentialJitterBounds drives jitter across its whole range: the backoff stays within ±jitter of its
// base and never above max.
func TestExponentialJitterBounds(t *testing.T) {
	for _, jitter := range []float64{0.1, 0.5, 1} {
		for i := 0; i <= 100; i++ {
			u := float64(i) / 100.1
			cfg := RestartConfig{Kind: ExponentialDelayRestart, InitialBackoff: time.Second, MaxBackoff: 4 * time.Second, Multiplier: 2, ResetThreshold: time.Hour, Jitter: jitter}
			vals := make([]float64, 5)
			for k := range vals {
				vals[k] = u
			}
			s, err := NewRestartStrategy(cfg, &fakeRandom{t: t, values: vals})
			if err != nil {
				t.Fatal(err)
			}
			base := 1000.0
			for k := 0; k < 5; k++ {
				s.NotifyFailure(int64(k), nil)
				b := float64(s.BackoffMillis())
				if b < base*(1-jitter)-0.5 || b > base*(1+jitter)+0.5 || b > 4000 || b < 0 {
					t.Fatalf("jitter %v u %v failure %d: backoff %v outside [%v, %v] or above max", jitter, u, k, b, base*(1-jitter), base*(1+jitter))
				}
				base = min(base*2, 4000)
			}
		}
	}
}
