package codec

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// temperature implements the Binary interfaces with pointer receivers.
type temperature struct{ milliC int64 }

func (t *temperature) AppendBinary(b []byte) ([]byte, error) {
	return binary.AppendVarint(b, t.milliC), nil
}

func (t *temperature) UnmarshalBinary(b []byte) error {
	v, n := binary.Varint(b)
	if n <= 0 || n != len(b) {
		return errors.New("bad temperature")
	}
	t.milliC = v
	return nil
}

// withTemps holds Binary fields inline, in an array and in a slice.
type withTemps struct {
	A    int32
	T    temperature
	Arr  [2]temperature
	List []temperature
	When time.Time
}

func TestBinary(t *testing.T) {
	t.Run("pointer receivers", func(t *testing.T) {
		c := Binary[temperature]()
		b := checkRoundTrip(t, c, temperature{-1500})
		if len(b) != 2 {
			t.Errorf("encoding % x, want the 2-byte varint", b)
		}
		var v temperature
		err := c.Decode([]byte{0x80}, &v)
		if !errors.Is(err, ErrMalformed) || err.Error() != "codec.Binary[codec.temperature]: malformed input: UnmarshalBinary failed: bad temperature" {
			t.Errorf("Decode(80) = %v", err)
		}
	})
	t.Run("value receiver AppendBinary", func(t *testing.T) {
		checkRoundTrip(t, Binary[netip.Addr](), netip.MustParseAddr("2001:db8::1"))
		checkRoundTrip(t, Binary[time.Time](), time.Date(2030, 1, 1, 0, 0, 0, 1, time.UTC))
	})
	t.Run("For agrees with Binary", func(t *testing.T) {
		v := temperature{300}
		a, _ := Binary[temperature]().Append(nil, v)
		b := checkRoundTrip(t, mustFor[temperature](t), v)
		if string(a) != string(b) {
			t.Errorf("For encodes % x, Binary % x", b, a)
		}
	})
	t.Run("fields", func(t *testing.T) {
		c := MustStruct[withTemps]()
		v := withTemps{A: 1, T: temperature{2}, Arr: [2]temperature{{3}, {4}}, List: []temperature{{5}, {-6}},
			When: time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC)}
		checkRoundTrip(t, c, v)
		checkRoundTrip(t, c, withTemps{})
	})
}
