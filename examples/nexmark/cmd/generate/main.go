// Command generate writes the Nexmark generator's events as JSON lines, one event per line, in event
// number order (parallelism 1): the input files of `runnel run nexmark --input` and of the Flink harness,
// and the golden file's source. It is a helper of the harness, not a product command.
//
//	go run ./examples/nexmark/cmd/generate --events 1000 [--rate R] [--seed S] [--base-time MS] [--output FILE]
//
// --rate only spaces the timestamps (1000/R ms apart; 0 is the nominal 10 M events/s): the file is
// written as fast as it can be.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/examples/nexmark"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("generate", pflag.ContinueOnError)
	events := fs.Uint64("events", 1000, "number of events (required to be positive)")
	rate := fs.Int64("rate", 0, "events per second that space the timestamps; 0 = the nominal 10,000,000")
	seed := fs.Uint64("seed", 0, "the generator's seed")
	base := fs.Int64("base-time", nexmark.DefaultBaseTime, "dateTime of event 0, epoch milliseconds")
	output := fs.String("output", "", "file to write (default stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *events == 0 {
		return errors.New("--events must be positive: the file is bounded")
	}
	g, err := nexmark.NewGenerator(nexmark.GeneratorConfig{Seed: *seed, Rate: *rate, BaseTime: *base})
	if err != nil {
		return err
	}
	out := stdout
	var f *os.File
	if *output != "" {
		if f, err = os.Create(*output); err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	w := bufio.NewWriterSize(out, 256<<10)
	var ev nexmark.Event
	var line []byte
	for n := range *events {
		g.Event(n, &ev)
		line = append(nexmark.AppendEvent(line[:0], &ev), '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if f != nil {
		return f.Close()
	}
	return nil
}
