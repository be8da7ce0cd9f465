// Package wordcount is the word count example: it counts the words of a UTF-8 text file (or of generated
// text) with keyed state and, when the input ends, writes one line "word<TAB>count" per distinct word,
// sorted by word.
//
// A word is a maximal run of Unicode letters and digits, lowercased. The pipeline is
//
//	source -> tokenize -> keyBy(word) -> count (keyed process, ValueState per word) -> sink (parallelism 1)
//
// count emits nothing per record; at end of input it emits each word's final count.
package wordcount

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/examples/internal/run"
)

// WordCount is a word and how often it occurs.
type WordCount struct {
	Word  string
	Count int64
}

// Job is a configured word count run.
type Job struct {
	Input  string // text file to count; empty: generated text
	Output string // file to write; empty: print the top 10 words
	Lines  int    // lines of generated text
	Top    int    // words printed without Output
}

// DefaultLines is the number of generated lines when no input file is given.
const DefaultLines = 200_000

// New registers the example's flags on fs (nil: none) and returns the job they configure.
func New(fs *pflag.FlagSet) *Job {
	j := &Job{Lines: DefaultLines, Top: 10}
	if fs != nil {
		fs.StringVar(&j.Input, "input", "", "UTF-8 text file to count (default: generated text)")
		fs.StringVar(&j.Output, "output", "", "file to write word<TAB>count lines to, sorted by word (default: print the top words)")
		fs.IntVar(&j.Lines, "lines", DefaultLines, "lines of generated text when there is no --input")
		fs.IntVar(&j.Top, "top", 10, "words to print when there is no --output")
	}
	return j
}

// Build adds the word count pipeline to env.
func (j *Job) Build(env *runnel.Environment, opts run.Options) error {
	var lines *runnel.Stream[string]
	if j.Input != "" {
		if _, err := os.Stat(j.Input); err != nil {
			return fmt.Errorf("--input: %w", err)
		}
		lines = runnel.FromSource(env, connector.TextFile(j.Input))
	} else {
		if j.Lines < 0 {
			return fmt.Errorf("--lines must not be negative, got %d", j.Lines)
		}
		if j.Lines == 0 {
			return errors.New("--lines must be at least 1")
		}
		p := env.Config().Parallelism
		lines = runnel.FromSource(env, connector.Generator(func(subtask int, seq uint64) string {
			// Subtask s of p emits lines s, s+p, s+2p, ...: the text does not depend on the parallelism.
			return GeneratedLine(seq*uint64(p) + uint64(subtask))
		}, connector.GeneratorOptions{TotalRecords: uint64(j.Lines)}))
	}
	if j.Output != "" {
		// The output is written when the input ends: a path that cannot be written is better told now.
		if err := run.CheckWritableFile(j.Output); err != nil {
			return fmt.Errorf("--output: %w", err)
		}
	}
	lines = lines.Name("source")
	words := runnel.FlatMap(lines, Tokenize).Name("tokenize")
	counts := runnel.Process(runnel.KeyBy(words, func(w string) string { return w }),
		func() runnel.KeyedProcessFunction[string, string, WordCount] { return &counter{} }).
		Name("count").WithCodec(codec.MustStruct[WordCount]())
	counts.SinkTo(&sortedSink{path: j.Output, top: j.Top, out: opts.Writer()}).Name("sink").SetParallelism(1)
	return nil
}

// Tokenize emits the words of line: maximal runs of Unicode letters and digits, lowercased.
func Tokenize(line string, out runnel.Collector[string]) error {
	start := -1
	for i, r := range line {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			out.Collect(strings.ToLower(line[start:i]))
			start = -1
		}
	}
	if start >= 0 {
		out.Collect(strings.ToLower(line[start:]))
	}
	return nil
}

// vocabulary is the word list of generated text, with some non-ASCII words.
var vocabulary = strings.Fields(`the of and to in a is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their has would when if so no more
stream state flink runnel window key time event watermark checkpoint barrier operator task shuffle buffer
credit network record codec sink source reduce process map filter union broadcast rebalance rescale
größe naïve café straße señor über crème déjà 東京 数据 流 abc123 x86 utf8 2026 v1`)

// GeneratedLine returns line i of the generated text: 4 to 15 words of a fixed vocabulary, with a skew so
// that some words are much more frequent than others.
func GeneratedLine(i uint64) string {
	h := run.Mix(i + 1)
	n := 4 + int(h%12)
	var b strings.Builder
	for k := 0; k < n; k++ {
		h = run.Mix(h + uint64(k))
		// Square a uniform index to favour the front of the vocabulary.
		u := float64(h>>11) / (1 << 53)
		w := vocabulary[int(u*u*float64(len(vocabulary)))]
		if k > 0 {
			if h&7 == 0 {
				b.WriteString(", ")
			} else {
				b.WriteByte(' ')
			}
		}
		if h&31 == 1 {
			w = strings.ToUpper(w)
		}
		b.WriteString(w)
	}
	b.WriteByte('.')
	return b.String()
}

// counter keeps a count per word and emits all counts at end of input.
type counter struct {
	runnel.KeyedProcessBase[string, WordCount]
	count runnel.ValueState[int64]
}

func (c *counter) Open(ctx runnel.KeyedContext[string]) error {
	var err error
	c.count, err = runnel.NewValueState[int64](ctx, "count")
	return err
}

func (c *counter) ProcessElement(_ runnel.KeyedContext[string], _ string, _ runnel.Collector[WordCount]) error {
	n, _ := c.count.Value()
	c.count.Update(n + 1)
	return nil
}

func (c *counter) EndInput(ctx runnel.KeyedContext[string], out runnel.Collector[WordCount]) error {
	return ctx.ForEachKey(func(word string) error {
		n, _ := c.count.Value()
		out.Collect(WordCount{Word: word, Count: n})
		return nil
	})
}

// sortedSink buffers the final counts and, at end of input, writes them sorted by word to a file (through
// a temporary file renamed into place) or prints the most frequent words.
type sortedSink struct {
	path string
	top  int
	out  io.Writer
}

func (s *sortedSink) CreateWriter(ctx runnel.RuntimeContext) (runnel.SinkWriter[WordCount], error) {
	if ctx.Parallelism() != 1 {
		return nil, fmt.Errorf("wordcount sink: needs parallelism 1, got %d", ctx.Parallelism())
	}
	return &sortedWriter{s: s, attempt: ctx.Attempt()}, nil
}

type sortedWriter struct {
	s       *sortedSink
	attempt int
	counts  []WordCount
	tmp     string
}

func (w *sortedWriter) Write(v WordCount) error {
	w.counts = append(w.counts, v)
	return nil
}

func (w *sortedWriter) Flush() error {
	if w.s.path == "" {
		PrintTop(w.s.out, w.counts, w.s.top)
		return nil
	}
	slices.SortFunc(w.counts, func(a, b WordCount) int { return strings.Compare(a.Word, b.Word) })
	w.tmp = fmt.Sprintf("%s.inprogress.%d", w.s.path, w.attempt)
	f, err := os.Create(w.tmp)
	if err != nil {
		return fmt.Errorf("wordcount sink: %w", err)
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	var line []byte
	for _, c := range w.counts {
		line = append(line[:0], c.Word...)
		line = append(line, '\t')
		line = strconv.AppendInt(line, c.Count, 10)
		line = append(line, '\n')
		bw.Write(line)
	}
	err = bw.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.tmp, w.s.path)
	}
	if err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("wordcount sink: %w", err)
	}
	w.tmp = ""
	return nil
}

func (w *sortedWriter) Close() error { return nil }

// SnapshotState implements runnel.CheckpointedWriter: the counts received so far. They come in a burst
// at the end of the input, and a checkpoint may fall inside it: a counter subtask restored after its end
// of input sends its counts no more, so the sink must keep those it had.
func (w *sortedWriter) SnapshotState(int64) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(len(w.counts)))
	for _, c := range w.counts {
		b = binary.AppendUvarint(b, uint64(len(c.Word)))
		b = append(b, c.Word...)
		b = binary.AppendVarint(b, c.Count)
	}
	return b, nil
}

// RestoreState implements runnel.CheckpointedWriter.
func (w *sortedWriter) RestoreState(b []byte) error {
	bad := errors.New("wordcount sink: malformed checkpointed counts")
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return bad
	}
	b = b[k:]
	counts := make([]WordCount, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return bad
		}
		word := string(b[k : k+int(l)])
		b = b[k+int(l):]
		c, k := binary.Varint(b)
		if k <= 0 {
			return bad
		}
		b = b[k:]
		counts = append(counts, WordCount{Word: word, Count: c})
	}
	if len(b) != 0 {
		return bad
	}
	w.counts = counts
	return nil
}

var printMu sync.Mutex

// PrintTop prints the n most frequent words (ties by word) as "count<TAB>word" lines.
func PrintTop(out io.Writer, counts []WordCount, n int) {
	sorted := slices.Clone(counts)
	slices.SortFunc(sorted, func(a, b WordCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Word, b.Word)
	})
	var total int64
	for _, c := range counts {
		total += c.Count
	}
	printMu.Lock()
	defer printMu.Unlock()
	fmt.Fprintf(out, "%d words, %d distinct; top %d:\n", total, len(counts), min(n, len(sorted)))
	for _, c := range sorted[:min(n, len(sorted))] {
		fmt.Fprintf(out, "%10d\t%s\n", c.Count, c.Word)
	}
}
