package checkpoint_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Nothing in this package may leave a goroutine behind: the coordinator starts none, and storage must not
// leak the ones its buckets start.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
