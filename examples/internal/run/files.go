package run

import "github.com/runnel-dev/runnel/internal/writable"

// CheckWritableFile reports whether a file can be written at path when the run ends, without changing
// anything there (writable.Check); an example checks its output files with it before its job runs.
func CheckWritableFile(path string) error { return writable.Check(path) }
