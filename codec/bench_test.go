package codec

import (
	"testing"
	"time"
)

// benchCodec measures Append into a reused buffer and Decode into a reused value, through the Codec
// interface as the engine calls them. SetBytes makes -bench report MB/s of encoded data.
func benchCodec[T any](b *testing.B, c Codec[T], v T) {
	src, err := c.Append(nil, v)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Append", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(src)))
		buf := make([]byte, 0, 4*len(src)+64)
		for b.Loop() {
			buf, _ = c.Append(buf[:0], v)
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(src)))
		var out T
		for b.Loop() {
			if err := c.Decode(src, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkInt64(b *testing.B)   { benchCodec(b, Int64(), 123456789) }
func BenchmarkFloat64(b *testing.B) { benchCodec(b, Float64(), 3.25) }
func BenchmarkBool(b *testing.B)    { benchCodec(b, Bool(), true) }
func BenchmarkString(b *testing.B)  { benchCodec(b, String(), "https://example.com/page") }
func BenchmarkBytes(b *testing.B)   { benchCodec(b, Bytes(), []byte("https://example.com/page")) }

func BenchmarkPair(b *testing.B) {
	b.Run("Int64Float64", func(b *testing.B) { benchCodec(b, Pair(Int64(), Float64()), Tuple2[int64, float64]{1, 2}) })
	b.Run("StringInt64", func(b *testing.B) { benchCodec(b, Pair(String(), Int64()), Tuple2[string, int64]{"user-42", 2}) })
}

// BenchmarkStruct is a record of five numeric fields, one of them a bool.
func BenchmarkStruct(b *testing.B) {
	type event struct {
		UserID int64
		ItemID int64
		Price  float64
		Qty    int32
		Promo  bool
	}
	benchCodec(b, MustStruct[event](), event{UserID: 1, ItemID: 2, Price: 9.99, Qty: 3, Promo: true})
}

func BenchmarkStructNumeric(b *testing.B) {
	benchCodec(b, MustStruct[numeric](), numeric{A: 1, E: 2, L: [3]int16{1, 2, 3}})
}

func BenchmarkStructMixed(b *testing.B) {
	benchCodec(b, MustStruct[mixed](), mixed{ID: 1, Name: "alice", Score: 0.5, Tags: []string{"red", "blue"}, URL: "https://example.com/page"})
}

func BenchmarkStructSlice(b *testing.B) {
	type series struct {
		ID     int64
		Points []point
	}
	benchCodec(b, MustStruct[series](), series{ID: 1, Points: make([]point, 32)})
}

func BenchmarkStructTime(b *testing.B) {
	type stamped struct {
		ID int64
		At time.Time
	}
	benchCodec(b, MustStruct[stamped](), stamped{ID: 1, At: time.Unix(1700000000, 5).UTC()})
}

func BenchmarkBinary(b *testing.B) { benchCodec(b, Binary[temperature](), temperature{2150}) }

// BenchmarkStructStrings is a Nexmark bid: numbers and three strings, which Decode makes from one copy of
// the record.
func BenchmarkStructStrings(b *testing.B) {
	type bid struct {
		Auction, Bidder, Price int64
		Channel, URL           string
		DateTime               int64
		Extra                  string
	}
	benchCodec(b, MustStruct[bid](), bid{Auction: 1000, Bidder: 2001, Price: 8_712_345, Channel: "channel-4242",
		URL: "https://www.nexmark.com/abcde/fghij/klmno/item.htm?query=1&channel_id=1234567", DateTime: 1_700_000_000_000,
		Extra: "qwertyuiopasdfghjklzxcvbnmqwertyuiopasdfghjklzxcvbnmqwertyuiop"})
}
