// Package uitest drives the dashboard in a real headless browser for tests: Debian's chromium, started
// and spoken to by chromedp (docs/ui.md, "Browser tests").
//
// Without a browser the tests skip, saying what to install, unless RUNNEL_UI_REQUIRED=1 (CI sets it), where
// they fail instead: a CI machine that lost its browser must not pass as green. RUNNEL_CHROMIUM names the
// browser's binary when it is not chromium, chromium-browser or google-chrome on the PATH. Screenshots go to
// $RUNNEL_UI_SCREENSHOTS when set (kept as artifacts), to the test's temporary directory otherwise; each is
// logged with its path.
package uitest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Width and Height are the browser window's size: the dashboard must read well at a laptop's 1280×800.
const (
	Width  = 1280
	Height = 800
)

// Browser is one headless browser with one tab, ended when its test ends.
type Browser struct {
	t   testing.TB
	ctx context.Context
	dir string

	mu      sync.Mutex
	console []string // the page's uncaught exceptions and error messages, other than failed requests
}

// FindChromium returns the browser binary the tests drive, or "" when there is none.
func FindChromium() string {
	if p := os.Getenv("RUNNEL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Start starts the browser, or skips t when there is none (fails it under RUNNEL_UI_REQUIRED=1). The
// browser and every goroutine of chromedp end in t's cleanup.
func Start(t testing.TB) *Browser {
	t.Helper()
	bin := FindChromium()
	if bin == "" {
		msg := "no chromium to run the dashboard's browser tests: install Debian's chromium (apt-get install chromium) or set RUNNEL_CHROMIUM to a Chrome binary"
		if os.Getenv("RUNNEL_UI_REQUIRED") == "1" {
			t.Fatal(msg + " (RUNNEL_UI_REQUIRED=1)")
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(Width, Height),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("force-device-scale-factor", "1"),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to start its sandbox as root (CI containers run as root).
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	b := &Browser{t: t, ctx: ctx, dir: screenshotDir(t)}
	consoleDone := make(chan struct{})
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-consoleDone
	})
	// The first action starts the browser; a failure here is the browser's, so say which binary.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		close(consoleDone)
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() {
		defer close(consoleDone)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			b.note(m)
		}
	}()
	return b
}

// failedRequest matches the browser's log entry for a request that failed (the server went away at the end
// of a test, or answered an error the page shows itself).
var failedRequest = regexp.MustCompile(`Failed to load resource|net::ERR_`)

func (b *Browser) note(m chromedp.ConsoleMessage) {
	if m.Type != chromedp.ConsoleException && m.Type != chromedp.ConsoleError {
		return
	}
	if m.Source == "network" || failedRequest.MatchString(m.Text) {
		return
	}
	text := m.String()
	if m.Exception != nil && m.Exception.Exception != nil && m.Exception.Exception.Description != "" {
		text += ": " + m.Exception.Exception.Description
	}
	b.mu.Lock()
	b.console = append(b.console, text)
	b.mu.Unlock()
}

// ConsoleErrors returns the page's uncaught exceptions and console errors so far (a violation of the
// Content-Security-Policy is one), without failed requests.
func (b *Browser) ConsoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

func screenshotDir(t testing.TB) string {
	dir := os.Getenv("RUNNEL_UI_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("RUNNEL_UI_SCREENSHOTS: %v", err)
	}
	return dir
}

// Context is the tab's context, for chromedp actions the helpers here do not cover.
func (b *Browser) Context() context.Context { return b.ctx }

// Open loads url and waits until the dashboard drew its first page from the API.
func (b *Browser) Open(url string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("opening %s: %v", url, err)
	}
	b.Await("the dashboard draws "+url, `document.querySelector('#app > div[id^="page-"]') !== null`, 20*time.Second)
}

// Go moves the page to the dashboard's route (a fragment such as "#/taskmanagers") and waits until it
// drew it.
func (b *Browser) Go(fragment, pageID string) {
	b.t.Helper()
	Eval[bool](b, fmt.Sprintf(`(location.hash = %q, true)`, fragment))
	b.Await("the dashboard draws "+fragment, fmt.Sprintf(`document.getElementById(%q) !== null`, pageID), 20*time.Second)
}

// Await waits until the JavaScript expression is truthy in the page, failing t after timeout with what
// it waited for.
func (b *Browser) Await(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		if errors.Is(err, chromedp.ErrPollingTimeout) {
			err = fmt.Errorf("not within %v", timeout)
		}
		b.t.Fatalf("waiting until %s (%s): %v\npage: %s", what, expr, err, b.text())
	}
}

// text is the page's visible text, cut, for failure messages.
func (b *Browser) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	const maxBytes = 3000
	if len(s) > maxBytes {
		s = s[:maxBytes] + "…"
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

// Eval evaluates the JavaScript expression in the page and decodes its value into T, failing b's test on
// an error.
func Eval[T any](b *Browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// Click clicks the first element the CSS selector matches, once there is one. The click is dispatched
// in the page, not with the mouse: the dashboard redraws itself every second, so an element found for a
// mouse click may be replaced before the mouse reaches it.
func (b *Browser) Click(selector string) {
	b.t.Helper()
	b.Await("there is a "+selector+" to click", fmt.Sprintf(`document.querySelector(%q) !== null`, selector), 10*time.Second)
	Eval[bool](b, fmt.Sprintf(`document.querySelector(%q).dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, view: window}))`, selector))
}

// Screenshot writes the whole page as name.png to the screenshot directory, logs its path and returns
// it.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
	return path
}
