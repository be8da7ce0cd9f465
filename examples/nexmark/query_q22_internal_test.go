package nexmark

import (
	"strings"
	"testing"
)

// TestSplitIndexes checks one scan for three pieces against SPLIT_INDEX's definition computed with
// strings.Split: the index-th piece between separators, empty pieces included, none past the last and
// none of an empty string.
func TestSplitIndexes(t *testing.T) {
	ref := func(s string, index int) (string, bool) {
		if s == "" {
			return "", false
		}
		parts := strings.Split(s, "/")
		if index >= len(parts) {
			return "", false
		}
		return parts[index], true
	}
	for _, s := range []string{
		"", "/", "//", "a", "a/b", "a/b/c", "a/b/c/d", "a/b/c/d/e", "a/b/c/d/e/f", "a/b/c/d/", "a/b/c//",
		"https://www.nexmark.com/abcde/fghij/klmno/item.htm?query=1", "https://www.nexmark.com", "https://x/",
		"///////",
	} {
		for first := range 5 {
			var got [3]string
			has := splitIndexes(s, '/', first, got[:])
			for i := range got {
				want, ok := ref(s, first+i)
				if has&(1<<i) != 0 != ok || ok && got[i] != want {
					t.Errorf("splitIndexes(%q, first %d) piece %d: %q (present %t), want %q (present %t)",
						s, first, i, got[i], has&(1<<i) != 0, want, ok)
				}
			}
		}
	}
}
