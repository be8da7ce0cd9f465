package runnel_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/connector"
)

type wordCount struct {
	Word  string
	Count int64
}

func tokenize(line string, out runnel.Collector[wordCount]) error {
	for _, w := range strings.FieldsFunc(line, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		out.Collect(wordCount{Word: strings.ToLower(w), Count: 1})
	}
	return nil
}

func TestWordCountSmoke(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []runnel.Option
	}{
		{"local", []runnel.Option{runnel.WithParallelism(2)}},
		{"tcp", []runnel.Option{runnel.WithParallelism(2), runnel.WithTaskManagers(2)}},
		{"unchained tiny buffers", []runnel.Option{runnel.WithParallelism(3), runnel.WithTaskManagers(2), runnel.WithChaining(false), runnel.WithBufferSize(64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(tc.opts...)
			lines := runnel.FromSource(env, connector.Collection([]string{"a b", "b c c", "The the THE", "x"})).Name("lines")
			words := runnel.FlatMap(lines, tokenize).Name("tokenize").WithCodec(codec.MustStruct[wordCount]())
			counts := runnel.Reduce(runnel.KeyBy(words, func(w wordCount) string { return w.Word }),
				func(a, b wordCount) (wordCount, error) { a.Count += b.Count; return a, nil }).Name("count")
			sink := connector.NewCollect[wordCount]()
			counts.SinkTo(sink).Name("collect")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := env.Execute(ctx, "wc")
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != "FINISHED" {
				t.Fatalf("status %s", res.Status)
			}
			final := map[string]int64{}
			for _, r := range sink.Records() {
				if r.Count > final[r.Word] {
					final[r.Word] = r.Count
				}
			}
			want := map[string]int64{"a": 1, "b": 2, "c": 2, "the": 3, "x": 1}
			var keys []string
			for k := range final {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(final) != len(want) {
				t.Fatalf("got %v", final)
			}
			for k, v := range want {
				if final[k] != v {
					t.Fatalf("count[%s] = %d, want %d (all %v)", k, final[k], v, final)
				}
			}
		})
	}
}
