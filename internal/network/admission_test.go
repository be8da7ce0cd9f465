package network

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAdmission drives the admission state machine through scripts of connection events and checks every
// decision: refusals past the limits with their reasons, the oldest silent pending connection closed to
// make room once it has been silent long enough, streaming connections never closed, and the counts kept
// exactly through evictions and closes.
func TestAdmission(t *testing.T) {
	const after = time.Second
	// A step is "accept ID HOST AT_MS -> WANT", "stream ID" or "close ID". WANT is "ok", "ok evict N" or
	// "refuse TEXT" (TEXT a part of the reason).
	cases := []struct {
		name          string
		max, perHost  int
		steps         []string
		open          int
		openFromHostA int
	}{
		{"under the limit", 3, 0, []string{
			"accept 1 a 0 -> ok", "accept 2 a 0 -> ok", "accept 3 b 0 -> ok",
		}, 3, 2},
		{"past the limit, all young: refused", 2, 0, []string{
			"accept 1 a 0 -> ok", "accept 2 a 10 -> ok", "accept 3 b 999 -> refuse 2 connections are open",
		}, 2, 2},
		{"past the limit, all streaming: refused however old", 2, 0, []string{
			"accept 1 a 0 -> ok", "stream 1", "accept 2 a 0 -> ok", "stream 2",
			"accept 3 b 60000 -> refuse MaxConnections",
		}, 2, 2},
		{"past the limit, an old silent one: the oldest is closed", 3, 0, []string{
			"accept 1 a 0 -> ok", "stream 1", "accept 2 a 100 -> ok", "accept 3 a 200 -> ok",
			"accept 4 b 1100 -> ok evict 2", "accept 5 b 1150 -> refuse MaxConnections", "accept 6 b 1200 -> ok evict 3",
			"accept 7 b 1300 -> refuse MaxConnections",
		}, 3, 1},
		{"a closed and an evicted connection free their slots once", 2, 0, []string{
			"accept 1 a 0 -> ok", "accept 2 a 0 -> ok", "accept 3 a 1000 -> ok evict 1", "close 1", "close 2",
			"accept 4 a 1000 -> ok", "accept 5 a 1000 -> refuse MaxConnections",
		}, 2, 2},
		{"per host: the host's own old silent one is closed, others are not", 10, 2, []string{
			"accept 1 b 0 -> ok", "accept 2 a 0 -> ok", "accept 3 a 500 -> ok",
			"accept 4 a 1000 -> ok evict 2", "accept 5 a 1100 -> refuse from a", "accept 6 b 1100 -> ok",
			"accept 7 b 1100 -> ok evict 1",
		}, 4, 2},
		{"per host: streaming ones are kept", 10, 1, []string{
			"accept 1 a 0 -> ok", "stream 1", "accept 2 a 5000 -> refuse MaxConnectionsPerHost", "accept 3 b 5000 -> ok",
		}, 2, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newAdmission(tc.max, tc.perHost, after)
			t0 := time.Unix(1000, 0)
			for _, step := range tc.steps {
				var id uint64
				if strings.HasPrefix(step, "stream ") {
					fmt.Sscanf(step, "stream %d", &id)
					a.streaming(id)
					continue
				}
				if strings.HasPrefix(step, "close ") {
					fmt.Sscanf(step, "close %d", &id)
					a.closed(id)
					continue
				}
				var host string
				var ms int
				lhs, want, _ := strings.Cut(step, " -> ")
				if _, err := fmt.Sscanf(lhs, "accept %d %s %d", &id, &host, &ms); err != nil {
					t.Fatalf("bad step %q: %v", step, err)
				}
				d := a.accept(id, host, t0.Add(time.Duration(ms)*time.Millisecond))
				switch {
				case want == "ok":
					if !d.admit || d.evict != 0 {
						t.Fatalf("%s: got %+v", step, d)
					}
				case strings.HasPrefix(want, "ok evict "):
					var victim uint64
					fmt.Sscanf(want, "ok evict %d", &victim)
					if !d.admit || d.evict != victim {
						t.Fatalf("%s: got %+v", step, d)
					}
				case strings.HasPrefix(want, "refuse "):
					if d.admit || d.evict != 0 || !strings.Contains(d.reason, strings.TrimPrefix(want, "refuse ")) {
						t.Fatalf("%s: got %+v", step, d)
					}
				default:
					t.Fatalf("bad want in %q", step)
				}
				if a.open() > tc.max {
					t.Fatalf("%s: %d open, limit %d", step, a.open(), tc.max)
				}
			}
			if a.open() != tc.open || a.perHost["a"] != tc.openFromHostA {
				t.Fatalf("open %d (from a: %d), want %d (%d)", a.open(), a.perHost["a"], tc.open, tc.openFromHostA)
			}
			pending := 0
			for _, c := range a.conns {
				if c.elem != nil {
					pending++
				}
			}
			if pending != a.pending.Len() {
				t.Fatalf("%d pending connections, %d in the pending list", pending, a.pending.Len())
			}
		})
	}
}

// TestLogLimiter pins one line per interval, the first at once, and the count of those held back.
func TestLogLimiter(t *testing.T) {
	l := logLimiter{every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0}, {time.Second, false, 0}, {9 * time.Second, false, 0}, {10 * time.Second, true, 2},
		{11 * time.Second, false, 0}, {30 * time.Second, true, 1}, {31 * time.Second, false, 0},
	} {
		ok, n := l.allow(t0.Add(tc.at))
		if ok != tc.ok || n != tc.suppressed {
			t.Fatalf("at %s: allow %v, %d held back; want %v, %d", tc.at, ok, n, tc.ok, tc.suppressed)
		}
	}
}
