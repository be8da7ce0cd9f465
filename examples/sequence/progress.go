package sequence

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/runnel-dev/runnel"
)

// The sink's progress log (--progress-dir): each sink writer, wherever it runs, appends the wall-clock time
// of every counters report it receives to a file of its own in the directory, so that the output of a job
// can be followed over time from outside the processes that run it (runnel bench jm-loss measures the gap
// in output across a change of JobManager with it; the REST API's counters are sampled every 200 ms and
// have no sample at all while no JobManager leads). The file is text:
//
//	# sequence sink progress pid=PID subtask=I attempt=A start=UNIX_MICROS
//	UNIX_MICROS
//	UNIX_MICROS
//	...
//
// one line per report, in the order written. Lines are written in batches (at least every
// progressFlushEvery while reports arrive, and when the writer closes), each batch with one write call,
// so that a reader never sees half a line of a batch that was written.

// progressFlushEvery is how long the progress lines of a writer stay in memory at most while reports
// arrive.
const progressFlushEvery = 10 * time.Millisecond

// ProgressHeader starts the first line of a progress file.
const ProgressHeader = "# sequence sink progress"

// progressSink wraps the sink: its writers also log the time of every report to a file in dir.
type progressSink struct {
	runnel.Sink[Counters]
	dir string
}

func (s progressSink) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[Counters], error) {
	w, err := s.Sink.CreateWriter(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	name := fmt.Sprintf("sink-%d-%d-%d-%d.log", ctx.SubtaskIndex(), ctx.Attempt(), os.Getpid(), now.UnixNano())
	f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sequence: the sink's progress file: %w", err)
	}
	p := &progressWriter{SinkWriter: w, f: f, flushed: now}
	p.buf = fmt.Appendf(p.buf, "%s pid=%d subtask=%d attempt=%d start=%d\n", ProgressHeader, os.Getpid(), ctx.SubtaskIndex(),
		ctx.Attempt(), now.UnixMicro())
	if err := p.flush(); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// progressWriter is a sink writer that logs the time of every record it writes.
type progressWriter struct {
	runnel.SinkWriter[Counters]
	f       *os.File
	buf     []byte
	flushed time.Time
}

func (p *progressWriter) Write(c Counters) error {
	now := time.Now()
	p.buf = strconv.AppendInt(p.buf, now.UnixMicro(), 10)
	p.buf = append(p.buf, '\n')
	if now.Sub(p.flushed) >= progressFlushEvery {
		if err := p.flush(); err != nil {
			return err
		}
	}
	return p.SinkWriter.Write(c)
}

func (p *progressWriter) flush() error {
	p.flushed = time.Now()
	if len(p.buf) == 0 {
		return nil
	}
	_, err := p.f.Write(p.buf)
	p.buf = p.buf[:0]
	if err != nil {
		return fmt.Errorf("sequence: writing the sink's progress: %w", err)
	}
	return nil
}

func (p *progressWriter) Flush() error {
	if err := p.flush(); err != nil {
		return err
	}
	return p.SinkWriter.Flush()
}

func (p *progressWriter) Close() error {
	err := p.flush()
	if cerr := p.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("sequence: closing the sink's progress file: %w", cerr)
	}
	if cerr := p.SinkWriter.Close(); err == nil {
		err = cerr
	}
	return err
}
