package errorbucket_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Injected faults must not leak the goroutines of the wrapped bucket.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
