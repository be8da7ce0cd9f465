package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/report"
)

func TestReportJSONAddsFieldsWithoutRenaming(t *testing.T) {
	id := int64(3)
	res := &report.JobResult{Job: "j", Status: "FINISHED", WallMillis: 5,
		Checkpoints: &report.CheckpointCounts{Completed: 2, LastCompletedID: 3},
		Failovers:   []report.FailoverResult{{Failed: "a[0]", Strategy: "full", Restarted: []string{"a[0]"}, CheckpointRestored: &id}}}
	b, err := reportJSON(res, map[string]any{"checker": map[string]int{"records": 7}, "status": "overridden?", "aaa": 1})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := json.Marshal(res)
	var want, got map[string]any
	if err := json.Unmarshal(plain, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for k, v := range want {
		if g, _ := json.Marshal(got[k]); string(g) != mustJSON(v) {
			t.Fatalf("field %q: %s, want %s", k, g, mustJSON(v))
		}
	}
	if len(got) != len(want)+2 || mustJSON(got["checker"]) != `{"records":7}` || mustJSON(got["aaa"]) != "1" {
		t.Fatalf("report: %s", b)
	}
	// The result's fields come first, in their order; then the extras, sorted.
	s := string(b)
	if !(strings.Index(s, `"job"`) < strings.Index(s, `"failovers"`) && strings.Index(s, `"failovers"`) < strings.Index(s, `"aaa"`) &&
		strings.Index(s, `"aaa"`) < strings.Index(s, `"checker"`)) || !strings.HasSuffix(s, "}\n") {
		t.Fatalf("order: %s", b)
	}
	// No extras: exactly the result.
	b, err = reportJSON(res, nil)
	var compact bytes.Buffer
	if err != nil || json.Compact(&compact, b) != nil || compact.String() != string(plain) {
		t.Fatalf("%v: %s", err, b)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
