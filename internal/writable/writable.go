// Package writable checks, before a job runs, that a file it will write when it ends can be written: a
// mistake in an output path is told at the start, not after the whole run. It leaves nothing behind.
package writable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Check reports whether a file can be written at path when the run ends, without changing
// anything there: path must not be a directory, its directory must exist, a new file must be creatable in
// it (a probe file is created and removed at once), and a file already at path must open for writing. A
// command checks its output files with it before the job runs, so that a mistake in a path is reported at
// the start, not after the whole run.
func Check(path string) error {
	if path == "" {
		return errors.New("no file name given")
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory, not a file", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("%s exists and cannot be written: %w", path, bare(err))
		}
		return f.Close()
	}
	// No file there (or no way to look): what its directory says is the better message.
	dir := filepath.Dir(path)
	switch di, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot create %s: directory %s does not exist", path, dir)
	case err != nil:
		return fmt.Errorf("cannot create %s: %w", path, bare(err))
	case !di.IsDir():
		return fmt.Errorf("cannot create %s: %s is not a directory", path, dir)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".probe-*")
	if err != nil {
		return fmt.Errorf("cannot create %s: %w", path, bare(err))
	}
	probe := f.Name()
	return errors.Join(f.Close(), os.Remove(probe))
}

// bare drops the path of a *fs.PathError (the caller names the path the user gave, not a probe's).
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
