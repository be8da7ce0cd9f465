package nexmark

import (
	"strconv"
	"unicode/utf8"
)

// The JSON lines writer. Output is the same byte for byte as bench/flink's JsonLines: no spaces, keys in
// the model's order, integers in decimal, strings escaped as below. It allocates nothing beyond growing dst.
//
// String escaping: '"' and '\\' get a backslash; \b \f \n \r \t their short forms; the other bytes below
// 0x20 \u00XX with lowercase hex; an invalid UTF-8 byte becomes \ufffd; everything else, non-ASCII
// included, is copied as it is (no HTML escaping).

// AppendEvent appends e as one JSON object (no newline): {"person":{...}}, {"auction":{...}} or
// {"bid":{...}} with the model's fields in the order of the issue.
func AppendEvent(dst []byte, e *Event) []byte {
	switch e.Kind {
	case KindPerson:
		p := &e.Person
		dst = append(dst, `{"person":`...)
		o := BeginObject(dst)
		o.Int("id", p.ID)
		o.String("name", p.Name)
		o.String("emailAddress", p.EmailAddress)
		o.String("creditCard", p.CreditCard)
		o.String("city", p.City)
		o.String("state", p.State)
		o.Int("dateTime", p.DateTime)
		o.String("extra", p.Extra)
		dst = o.End()
	case KindAuction:
		a := &e.Auction
		dst = append(dst, `{"auction":`...)
		o := BeginObject(dst)
		o.Int("id", a.ID)
		o.String("itemName", a.ItemName)
		o.String("description", a.Description)
		o.Int("initialBid", a.InitialBid)
		o.Int("reserve", a.Reserve)
		o.Int("dateTime", a.DateTime)
		o.Int("expires", a.Expires)
		o.Int("seller", a.Seller)
		o.Int("category", a.Category)
		o.String("extra", a.Extra)
		dst = o.End()
	default:
		dst = appendBid(append(dst, `{"bid":`...), &e.Bid)
	}
	return append(dst, '}')
}

// appendBid appends b as a JSON object with the model's fields in order: an event's body and q0's row.
func appendBid(dst []byte, b *Bid) []byte {
	o := BeginObject(dst)
	o.Int("auction", b.Auction)
	o.Int("bidder", b.Bidder)
	o.Int("price", b.Price)
	o.String("channel", b.Channel)
	o.String("url", b.URL)
	o.Int("dateTime", b.DateTime)
	o.String("extra", b.Extra)
	return o.End()
}

// Object appends one flat JSON object to a buffer, field by field, for the queries' output rows:
//
//	o := nexmark.BeginObject(line[:0])
//	o.Int("auction", b.Auction)
//	o.Decimal3("price", b.Price*908)
//	line = o.End()
//
// It is a value on the caller's stack and allocates nothing beyond growing the buffer.
type Object struct {
	b      []byte
	fields int
}

// BeginObject appends '{' to dst and returns the object's writer.
func BeginObject(dst []byte) Object { return Object{b: append(dst, '{')} }

func (o *Object) key(k string) {
	if o.fields > 0 {
		o.b = append(o.b, ',')
	}
	o.fields++
	o.b = AppendString(o.b, k)
	o.b = append(o.b, ':')
}

// Int appends the field k with the integer v.
func (o *Object) Int(k string, v int64) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

// String appends the field k with the string v, escaped.
func (o *Object) String(k, v string) {
	o.key(k)
	o.b = AppendString(o.b, v)
}

// Decimal3 appends the field k with the number v/1000 written exactly (see AppendDecimal3).
func (o *Object) Decimal3(k string, thousandths int64) {
	o.key(k)
	o.b = AppendDecimal3(o.b, thousandths)
}

// End appends '}' and returns the buffer.
func (o *Object) End() []byte { return append(o.b, '}') }

// AppendDecimal3 appends v/1000 as an exact decimal number: the integer part, then, if v is not a multiple
// of 1000, a point and the three decimals with trailing zeros trimmed (1120472 → 1120.472, 90800 → 90.8,
// 908000 → 908, -5 → -0.005). q1's euro price 0.908 × price is AppendDecimal3(dst, price·908).
func AppendDecimal3(dst []byte, v int64) []byte {
	u := uint64(v)
	if v < 0 {
		dst = append(dst, '-')
		u = -u // two's complement: correct for math.MinInt64 too
	}
	dst = strconv.AppendUint(dst, u/1000, 10)
	frac := u % 1000
	if frac == 0 {
		return dst
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, digits[:n]...)
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string with the escaping above.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
