package nexmark_test

import (
	"errors"
	"testing"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

// samples are events of every kind, with empty, non-ASCII and control-character strings.
func samples(t testing.TB) []nexmark.Event {
	evs := generate(t, nexmark.GeneratorConfig{Seed: 5, Rate: 100}, 200)
	return append(evs,
		nexmark.Event{Kind: nexmark.KindPerson},
		nexmark.Event{Kind: nexmark.KindAuction, Auction: nexmark.Auction{ID: -1, ItemName: "ü\x00\"", Expires: 1 << 62}},
		nexmark.Event{Kind: nexmark.KindBid, Bid: nexmark.Bid{Price: -9, Channel: "\n", URL: string(make([]byte, 300))}},
	)
}

// TestEventCodecRoundTrip: every event decodes to itself, and every prefix of an encoding is malformed.
func TestEventCodecRoundTrip(t *testing.T) {
	c := nexmark.EventCodec()
	for i, e := range samples(t) {
		b, err := c.Append(nil, e)
		if err != nil {
			t.Fatalf("event %d: Append: %v", i, err)
		}
		var got nexmark.Event
		if err := c.Decode(b, &got); err != nil {
			t.Fatalf("event %d: Decode: %v", i, err)
		}
		if got != e {
			t.Fatalf("event %d: decoded\n%+v\nwant\n%+v", i, got, e)
		}
		for cut := range len(b) {
			if err := c.Decode(b[:cut], &got); !errors.Is(err, codec.ErrMalformed) {
				t.Fatalf("event %d cut at %d of %d bytes: %v, want a malformed error", i, cut, len(b), err)
			}
		}
		if err := c.Decode(append(b, 0), &got); !errors.Is(err, codec.ErrMalformed) {
			t.Fatalf("event %d with a byte after it: %v", i, err)
		}
	}
}

// TestEventCodecRefuses names what is wrong with records no Append makes.
func TestEventCodecRefuses(t *testing.T) {
	c := nexmark.EventCodec()
	if _, err := c.Append(nil, nexmark.Event{Kind: 3}); err == nil {
		t.Fatal("Append of kind 3 succeeded")
	}
	for _, tc := range []struct {
		name string
		rec  []byte
	}{
		{"empty", nil},
		{"unknown kind", []byte{3}},
		{"non-minimal length", append(append([]byte{2}, make([]byte, 24)...), 0x80, 0x00)},
		{"huge length", append(append([]byte{2}, make([]byte, 24)...), 0xff, 0xff, 0xff, 0xff, 0x0f)},
	} {
		var e nexmark.Event
		if err := c.Decode(tc.rec, &e); !errors.Is(err, codec.ErrMalformed) {
			t.Errorf("%s: %v, want a malformed error", tc.name, err)
		}
	}
}

// TestEventCodecAllocations: Append allocates nothing into a large enough buffer; Decode one string per event.
func TestEventCodecAllocations(t *testing.T) {
	c := nexmark.EventCodec()
	evs := generate(t, nexmark.GeneratorConfig{}, 50)
	buf := make([]byte, 0, 4096)
	var e nexmark.Event
	for _, k := range []int{0, 1, 4} {
		ev := evs[k]
		if a := testing.AllocsPerRun(100, func() { buf, _ = c.Append(buf[:0], ev) }); a != 0 {
			t.Errorf("Append of a %s: %v allocations", ev.Kind, a)
		}
		rec, _ := c.Append(nil, ev)
		if a := testing.AllocsPerRun(100, func() { _ = c.Decode(rec, &e) }); a != 1 {
			t.Errorf("Decode of a %s: %v allocations, want 1", ev.Kind, a)
		}
	}
}

// FuzzEventCodec: Decode never panics, and whatever it accepts encodes back to the same bytes (one
// encoding per event).
func FuzzEventCodec(f *testing.F) {
	c := nexmark.EventCodec()
	for _, e := range samples(f)[:8] {
		b, _ := c.Append(nil, e)
		f.Add(b)
	}
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e nexmark.Event
		if err := c.Decode(b, &e); err != nil {
			if !errors.Is(err, codec.ErrMalformed) {
				t.Fatalf("error not malformed: %v", err)
			}
			return
		}
		again, err := c.Append(nil, e)
		if err != nil || string(again) != string(b) {
			t.Fatalf("re-encoding differs: % x, want % x (%v)", again, b, err)
		}
	})
}
