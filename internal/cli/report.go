package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/runnel-dev/runnel/internal/report"
)

// writeReport writes the job result as one JSON object: the fields of res, under their own names and in
// their order, followed by the example's extra fields (sorted by name; one named like a field of res is
// dropped).
func writeReport(path string, res *report.JobResult, extra map[string]any) error {
	b, err := reportJSON(res, extra)
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}

func reportJSON(res *report.JobResult, extra map[string]any) ([]byte, error) {
	base, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	if len(extra) > 0 {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(base, &fields); err != nil {
			return nil, err
		}
		var b bytes.Buffer
		b.Write(base[:len(base)-1]) // without the closing brace
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			if _, taken := fields[k]; taken {
				continue
			}
			v, err := json.Marshal(extra[k])
			if err != nil {
				return nil, fmt.Errorf("report field %q: %w", k, err)
			}
			kb, _ := json.Marshal(k)
			b.WriteByte(',')
			b.Write(kb)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteByte('}')
		base = b.Bytes()
	}
	var out bytes.Buffer
	if err := json.Indent(&out, base, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
