package run

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// An example's --output FILE is written exactly once through a connector.FileSink at parallelism 1 into
// the directory PartsDir(FILE), and joined into FILE when the job ends (JoinParts): the sink commits a part
// file with each checkpoint, so FILE holds each result once also across failures.

// PartsDir is the directory the FileSink of --output FILE writes its part files into.
func PartsDir(output string) string { return output + ".parts" }

// PrepareParts makes the parts directory of output. A run that does not resume from a savepoint or
// checkpoint starts it empty: the part files of an earlier run there (which ended before it joined them)
// are not this run's output. A resumed run keeps them: the parts committed before the savepoint are its
// output.
func PrepareParts(output string, restoring bool) error {
	dir := PartsDir(output)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if restoring {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && (strings.HasPrefix(n, "part-") || strings.HasPrefix(n, ".part-")) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// part is one committed part file: part-RUN-SUBTASK-N.
type part struct {
	name, run string
	sub, n    uint64
}

// committedParts lists the committed parts in dir in the order they were written: by run, subtask and
// number (the sink has one subtask, so this is the order of its records).
func committedParts(dir string) ([]part, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var parts []part
	for _, e := range entries {
		f := strings.Split(e.Name(), "-")
		if e.IsDir() || len(f) != 4 || f[0] != "part" {
			continue // hidden (in progress, pending) or not the sink's
		}
		sub, err1 := strconv.ParseUint(f[2], 10, 64)
		n, err2 := strconv.ParseUint(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: a part file name that is not part-RUN-SUBTASK-N: %s", dir, e.Name())
		}
		parts = append(parts, part{name: e.Name(), run: f[1], sub: sub, n: n})
	}
	slices.SortFunc(parts, func(a, b part) int {
		return cmp.Or(cmp.Compare(a.run, b.run), cmp.Compare(a.sub, b.sub), cmp.Compare(a.n, b.n))
	})
	return parts, nil
}

// JoinParts writes the committed parts of output's parts directory into output (through a temporary file
// renamed over it, so a reader sees the old file or the new one) and returns the lines written. When
// finished (the job FINISHED, so nothing can resume it) it then removes the parts directory.
func JoinParts(output string, finished bool) (int64, error) {
	dir := PartsDir(output)
	parts, err := committedParts(dir)
	if err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(output), "."+filepath.Base(output)+".tmp-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing there
	w := bufio.NewWriterSize(tmp, 256<<10)
	var lines int64
	for _, p := range parts {
		b, err := os.ReadFile(filepath.Join(dir, p.name))
		if err != nil {
			tmp.Close()
			return 0, err
		}
		lines += int64(strings.Count(string(b), "\n"))
		w.Write(b)
	}
	if err := errors.Join(w.Flush(), tmp.Sync(), tmp.Close()); err != nil {
		return 0, fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), output); err != nil {
		return 0, err
	}
	if finished {
		return lines, os.RemoveAll(dir)
	}
	return lines, nil
}
