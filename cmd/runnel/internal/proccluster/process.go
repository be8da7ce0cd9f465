// Package proccluster runs a Runnel cluster as child processes of one runnel binary: a JobManager and
// TaskManagers, each in its own process, as `runnel bench tm-loss`, `runnel bench throughput --processes`
// and the CLI's cluster tests need. It starts them, finds the addresses they print, reads the JobManager's
// REST API, kills or freezes a process, and stops and reaps every process it started.
//
// It owns the child processes only: what a benchmark measures and what a test asserts stay with them. It
// must not run a job itself (the callers submit, with runnel.Submit or a `runnel submit` child).
package proccluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// lineBytes bounds one stderr line; a longer one ends the line scanning (the rest is drained unread, so
// that the child never blocks on a full pipe).
const lineBytes = 1 << 20

// Options say how to start a child process.
type Options struct {
	// Binary is the runnel binary; "" is this process's own executable.
	Binary string
	// Dir is the working directory; "" is this process's.
	Dir string
	// Env is added to this process's environment.
	Env []string
	// TailLines bounds the stderr lines kept, the newest; 0 keeps every line. A watched pattern (Watch) is
	// matched against every line, kept or not.
	TailLines int
	// Watch lists the patterns whose first match WaitFor must find even when its line is no longer kept.
	Watch []*regexp.Regexp
	// Log, if set, gets a line "bench: started NAME (pid N)" for every child, so that whoever reads it can
	// check that no child outlives its parent.
	Log io.Writer
}

// Process is a child process: the runnel binary in one role. Its stderr is read line by line: the lines
// are kept (the last Options.TailLines of them), and the first match of each watched pattern is
// remembered. Its methods may be called from any goroutine.
type Process struct {
	// Name names the process in errors ("jobmanager", "tm-2", "submit").
	Name string

	cmd   *exec.Cmd
	tailN int
	watch []*regexp.Regexp

	mu      sync.Mutex
	lines   []string                    // the kept stderr lines
	marks   map[*regexp.Regexp][]string // first submatches of the watched patterns
	changed chan struct{}               // closed, and replaced, when a line arrives
	frozen  bool                        // SIGSTOPped: SIGTERM would stay pending, so it is SIGKILLed

	done chan struct{} // closed once the process exited and was reaped
	err  error         // what Wait returned; read after done
}

// Start starts the runnel binary with args. Its owner must end it (Kill, or Stop) so that it is reaped.
func Start(name string, opt Options, args ...string) (*Process, error) {
	bin := opt.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("start %s: finding this binary: %w", name, err)
		}
		bin = exe
	}
	p := &Process{Name: name, cmd: exec.Command(bin, args...), tailN: opt.TailLines, watch: opt.Watch,
		marks: map[*regexp.Regexp][]string{}, changed: make(chan struct{}), done: make(chan struct{})}
	p.cmd.Dir = opt.Dir
	if len(opt.Env) > 0 {
		p.cmd.Env = append(os.Environ(), opt.Env...)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if opt.Log != nil {
		fmt.Fprintf(opt.Log, "bench: started %s (pid %d)\n", name, p.cmd.Process.Pid)
	}
	go p.read(stderr)
	return p, nil
}

// read consumes the child's stderr until it closes, then reaps the child (os/exec wants every read of
// the pipe done before Wait).
func (p *Process) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), lineBytes)
	for sc.Scan() {
		p.line(sc.Text())
	}
	_, _ = io.Copy(io.Discard, r)
	p.err = p.cmd.Wait()
	close(p.done)
}

func (p *Process) line(l string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tailN > 0 && len(p.lines) == p.tailN {
		p.lines = slices.Delete(p.lines, 0, 1)
	}
	p.lines = append(p.lines, l)
	for _, re := range p.watch {
		if _, ok := p.marks[re]; ok {
			continue
		}
		if m := re.FindStringSubmatch(l); m != nil {
			p.marks[re] = m
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// Stderr returns the kept stderr lines, each ended by a newline.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lines) == 0 {
		return ""
	}
	return strings.Join(p.lines, "\n") + "\n"
}

// match returns the first match of re: remembered if re is watched, else in the kept lines.
func (p *Process) match(re *regexp.Regexp) ([]string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.marks[re]; ok {
		return m, true
	}
	for _, l := range p.lines {
		if m := re.FindStringSubmatch(l); m != nil {
			return m, true
		}
	}
	return nil, false
}

// WaitFor waits until the child printed a line matching re and returns the submatches of the first such
// line. A pattern that is not watched is looked for in the kept lines only.
func (p *Process) WaitFor(ctx context.Context, re *regexp.Regexp, timeout time.Duration) ([]string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		if m, ok := p.match(re); ok {
			return m, nil
		}
		select {
		case <-changed:
		case <-p.done:
			if m, ok := p.match(re); ok {
				return m, nil
			}
			return nil, fmt.Errorf("%s exited (%v) before printing %q; its last lines:\n%s", p.Name, p.err, re, p.lastLines())
		case <-timer.C:
			return nil, fmt.Errorf("%s did not print %q within %v; its last lines:\n%s", p.Name, re, timeout, p.lastLines())
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s to print %q: %w", p.Name, re, ctx.Err())
		}
	}
}

// lastLines returns the last kept lines, for error messages.
func (p *Process) lastLines() string {
	const n = 100
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
}

// LastLines returns the last kept stderr lines (at most 100), for error messages.
func (p *Process) LastLines() string { return p.lastLines() }

// Pid returns the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child exited and was reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited waits up to timeout for the child to exit and returns its exit code.
func (p *Process) Exited(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s still runs after %v; its last lines:\n%s", p.Name, timeout, p.lastLines())
	}
}

// Signal sends sig unless the child was reaped already (its pid may belong to another process by then).
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s %s (pid %d): %w", sig, p.Name, p.cmd.Process.Pid, err)
	}
	return nil
}

// Kill SIGKILLs the child and waits until it is reaped.
func (p *Process) Kill() error {
	err := p.Signal(syscall.SIGKILL)
	<-p.done
	return err
}

// Freeze SIGSTOPs the child: it keeps its sockets open and answers nothing, as a hung machine would.
func (p *Process) Freeze() error {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
	return p.Signal(syscall.SIGSTOP)
}

// beginStop asks the child to exit: SIGTERM, or SIGKILL when it is frozen.
func (p *Process) beginStop() {
	p.mu.Lock()
	frozen := p.frozen
	p.mu.Unlock()
	if frozen {
		_ = p.Signal(syscall.SIGKILL)
		return
	}
	_ = p.Signal(syscall.SIGTERM)
}

// finishStop waits until deadline for the child to exit, then SIGKILLs it; it returns once it is reaped.
func (p *Process) finishStop(deadline time.Time) {
	select {
	case <-p.done:
	case <-time.After(time.Until(deadline)):
		_ = p.Kill()
	}
}

// Stop ends the children together: SIGTERM (SIGKILL for a frozen one), then SIGKILL for those still
// running after grace. It returns once every one is reaped; nil entries are skipped.
func Stop(grace time.Duration, ps ...*Process) {
	ps = slices.DeleteFunc(slices.Clone(ps), func(p *Process) bool { return p == nil })
	for _, p := range ps {
		p.beginStop()
	}
	deadline := time.Now().Add(grace)
	for _, p := range ps {
		p.finishStop(deadline)
	}
}
