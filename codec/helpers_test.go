package codec

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// checkRoundTrip encodes v (after a prefix, to check Append keeps what dst held), decodes it back,
// and checks the decoded value equals v. It returns the encoding.
func checkRoundTrip[T any](t *testing.T, c Codec[T], v T) []byte {
	t.Helper()
	prefix := []byte("prefix")
	b, err := c.Append(append([]byte(nil), prefix...), v)
	if err != nil {
		t.Fatalf("Append(%s): %v", short(v), err)
	}
	if !bytes.HasPrefix(b, prefix) {
		t.Fatalf("Append(%s) clobbered dst: %s", short(v), shortHex(b))
	}
	b = b[len(prefix):]
	if n := sizeOf(c); n >= 0 && len(b) != n {
		t.Errorf("Append(%s) made %d bytes, codec says its size is %d", short(v), len(b), n)
	}
	var got T
	if err := c.Decode(b, &got); err != nil {
		t.Fatalf("Decode(Append(%s)) = %v; encoding %s", short(v), err, shortHex(b))
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("round trip: got %s, want %s; encoding %s", short(got), short(v), shortHex(b))
	}
	return b
}

// checkDecodeCanonical decodes src and, if that succeeds, checks that encoding the value again
// gives back exactly src: every value has one encoding. A failure must wrap ErrMalformed.
// It reports whether src decoded.
func checkDecodeCanonical[T any](t testing.TB, c Codec[T], src []byte) bool {
	t.Helper()
	var v T
	if err := c.Decode(src, &v); err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("Decode(%s) = %v, which does not wrap ErrMalformed", shortHex(src), err)
		}
		return false
	}
	again, err := c.Append(nil, v)
	if err != nil {
		t.Fatalf("Append(Decode(%s)) = %v", shortHex(src), err)
	}
	if !bytes.Equal(again, src) {
		t.Fatalf("Decode(%s) = %s, which encodes as %s", shortHex(src), short(v), shortHex(again))
	}
	return true
}

// checkDamaged checks Decode on every strict prefix of a valid encoding b and on b with a byte
// appended: each must fail with ErrMalformed or decode to a value that encodes to exactly that input.
// For a fixed-size codec every one of them must fail.
func checkDamaged[T any](t *testing.T, c Codec[T], b []byte) {
	t.Helper()
	fixed := sizeOf(c) >= 0
	for i := range len(b) {
		if checkDecodeCanonical(t, c, b[:i]) && fixed {
			t.Errorf("Decode of %d-byte prefix of %s succeeded; want error", i, shortHex(b))
		}
	}
	long := append(append([]byte(nil), b...), 0)
	if checkDecodeCanonical(t, c, long) && fixed {
		t.Errorf("Decode(%s) with a byte too many succeeded; want error", shortHex(long))
	}
}

// checkCodec runs checkRoundTrip and then checkDamaged on the encoding, and returns the encoding.
func checkCodec[T any](t *testing.T, c Codec[T], v T) []byte {
	t.Helper()
	b := checkRoundTrip(t, c, v)
	checkDamaged(t, c, b)
	return b
}

func isMalformed(err error) bool { return errors.Is(err, ErrMalformed) }

// short formats v for a test message, cut to a readable length.
func short(v any) string {
	s := fmt.Sprintf("%+v", v)
	if len(s) > 300 {
		s = s[:300] + fmt.Sprintf("... (%d more characters)", len(s)-300)
	}
	return s
}

// shortHex formats b in hex for a test message, cut to a readable length.
func shortHex(b []byte) string {
	if len(b) > 100 {
		return fmt.Sprintf("% x... (%d bytes)", b[:100], len(b))
	}
	return fmt.Sprintf("% x", b)
}
