package mtlstest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// LogBuffer is a log that servers' goroutines write while the test reads it. The zero value is empty and
// ready.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns all that was written.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger is a text logger at INFO that writes to b.
func (b *LogBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// Lines returns the lines that contain every one of subs.
func (b *LogBuffer) Lines(subs ...string) []string {
	var out []string
next:
	for _, l := range strings.Split(b.String(), "\n") {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// WaitLines waits up to 10 seconds until the log has n lines that contain every one of subs, and returns
// them; it fails the test, showing the log, if they do not come.
func (b *LogBuffer) WaitLines(t testing.TB, n int, subs ...string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := b.Lines(subs...)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d log lines with %q, want %d; the log:\n%s", len(got), subs, n, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
