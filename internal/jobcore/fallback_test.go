package jobcore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/network"
)

// TestLogIncompleteText holds logIncompleteText to network.ErrLogIncomplete, whose text the fallback
// decision looks for in a failure (jobcore does not import network).
func TestLogIncompleteText(t *testing.T) {
	err := fmt.Errorf("connect input 0: %w", network.ErrLogIncomplete)
	if !strings.Contains(err.Error(), logIncompleteText) {
		t.Fatalf("%q does not contain %q: the fallback would not see an incomplete log", err, logIncompleteText)
	}
}
