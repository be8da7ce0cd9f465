package nexmark

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/runnel-dev/runnel/codec"
)

// EventCodec returns the codec of Event: the kind's byte, then the fields of the kind's value in
// declaration order, integers as 8 bytes little-endian and strings as a uvarint length and their bytes.
// The other two values are not encoded (they are zero). Decode makes one string of all the record's string
// bytes and slices the fields from it: one allocation per event.
func EventCodec() codec.Codec[Event] { return eventCodec{} }

type eventCodec struct{}

// Append implements codec.Codec.
func (eventCodec) Append(dst []byte, e Event) ([]byte, error) {
	dst = append(dst, byte(e.Kind))
	switch e.Kind {
	case KindPerson:
		p := &e.Person
		dst = binary.LittleEndian.AppendUint64(dst, uint64(p.ID))
		dst = appendStr(dst, p.Name)
		dst = appendStr(dst, p.EmailAddress)
		dst = appendStr(dst, p.CreditCard)
		dst = appendStr(dst, p.City)
		dst = appendStr(dst, p.State)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(p.DateTime))
		dst = appendStr(dst, p.Extra)
	case KindAuction:
		a := &e.Auction
		dst = binary.LittleEndian.AppendUint64(dst, uint64(a.ID))
		dst = appendStr(dst, a.ItemName)
		dst = appendStr(dst, a.Description)
		for _, v := range [...]int64{a.InitialBid, a.Reserve, a.DateTime, a.Expires, a.Seller, a.Category} {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
		}
		dst = appendStr(dst, a.Extra)
	case KindBid:
		b := &e.Bid
		for _, v := range [...]int64{b.Auction, b.Bidder, b.Price} {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
		}
		dst = appendStr(dst, b.Channel)
		dst = appendStr(dst, b.URL)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(b.DateTime))
		dst = appendStr(dst, b.Extra)
	default:
		return dst, &codec.Error{Codec: "nexmark.EventCodec", Problem: "unknown kind " + strconv.Itoa(int(e.Kind))}
	}
	return dst, nil
}

func appendStr(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// decoder walks one record. Strings are first located (offsets into src), then copied out together.
type decoder struct {
	src []byte
	pos int
	err *codec.Error
}

func (d *decoder) fail(field, problem string) {
	if d.err == nil {
		d.err = &codec.Error{Codec: "nexmark.EventCodec", Field: field, Problem: problem}
	}
}

func (d *decoder) int64(field string) int64 {
	if d.err != nil {
		return 0
	}
	if len(d.src)-d.pos < 8 {
		d.fail(field, "want 8 bytes, have "+strconv.Itoa(len(d.src)-d.pos))
		return 0
	}
	v := int64(binary.LittleEndian.Uint64(d.src[d.pos:]))
	d.pos += 8
	return v
}

// span reads a string's length and returns where its bytes are in src.
func (d *decoder) span(field string) [2]int {
	if d.err != nil {
		return [2]int{}
	}
	l, n := binary.Uvarint(d.src[d.pos:])
	if n <= 0 {
		d.fail(field, "bad string length")
		return [2]int{}
	}
	if n != uvarintLen(l) {
		d.fail(field, "non-minimal string length")
		return [2]int{}
	}
	d.pos += n
	if l > uint64(len(d.src)-d.pos) {
		d.fail(field, "string of "+strconv.FormatUint(l, 10)+" bytes, have "+strconv.Itoa(len(d.src)-d.pos))
		return [2]int{}
	}
	s := [2]int{d.pos, d.pos + int(l)}
	d.pos += int(l)
	return s
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// copyStrings copies the located strings into one string and returns the fields.
func (d *decoder) copyStrings(spans []([2]int), out []*string) {
	total := 0
	for _, s := range spans {
		total += s[1] - s[0]
	}
	// A strings.Builder hands over its buffer without a copy: one allocation for all the fields.
	var sb strings.Builder
	sb.Grow(total)
	for _, s := range spans {
		sb.Write(d.src[s[0]:s[1]])
	}
	all := sb.String()
	at := 0
	for i, s := range spans {
		l := s[1] - s[0]
		*out[i] = all[at : at+l]
		at += l
	}
}

// Decode implements codec.Codec.
func (eventCodec) Decode(src []byte, e *Event) error {
	if len(src) == 0 {
		return &codec.Error{Codec: "nexmark.EventCodec", Problem: "empty record"}
	}
	d := decoder{src: src, pos: 1}
	var spans [6][2]int
	switch k := Kind(src[0]); k {
	case KindPerson:
		*e = Event{Kind: k}
		p := &e.Person
		p.ID = d.int64("Person.ID")
		spans[0] = d.span("Person.Name")
		spans[1] = d.span("Person.EmailAddress")
		spans[2] = d.span("Person.CreditCard")
		spans[3] = d.span("Person.City")
		spans[4] = d.span("Person.State")
		p.DateTime = d.int64("Person.DateTime")
		spans[5] = d.span("Person.Extra")
		if d.done() {
			d.copyStrings(spans[:], []*string{&p.Name, &p.EmailAddress, &p.CreditCard, &p.City, &p.State, &p.Extra})
		}
	case KindAuction:
		*e = Event{Kind: k}
		a := &e.Auction
		a.ID = d.int64("Auction.ID")
		spans[0] = d.span("Auction.ItemName")
		spans[1] = d.span("Auction.Description")
		a.InitialBid = d.int64("Auction.InitialBid")
		a.Reserve = d.int64("Auction.Reserve")
		a.DateTime = d.int64("Auction.DateTime")
		a.Expires = d.int64("Auction.Expires")
		a.Seller = d.int64("Auction.Seller")
		a.Category = d.int64("Auction.Category")
		spans[2] = d.span("Auction.Extra")
		if d.done() {
			d.copyStrings(spans[:3], []*string{&a.ItemName, &a.Description, &a.Extra})
		}
	case KindBid:
		*e = Event{Kind: k}
		b := &e.Bid
		b.Auction = d.int64("Bid.Auction")
		b.Bidder = d.int64("Bid.Bidder")
		b.Price = d.int64("Bid.Price")
		spans[0] = d.span("Bid.Channel")
		spans[1] = d.span("Bid.URL")
		b.DateTime = d.int64("Bid.DateTime")
		spans[2] = d.span("Bid.Extra")
		if d.done() {
			d.copyStrings(spans[:3], []*string{&b.Channel, &b.URL, &b.Extra})
		}
	default:
		return &codec.Error{Codec: "nexmark.EventCodec", Problem: "unknown kind " + strconv.Itoa(int(k))}
	}
	if d.err != nil {
		return d.err
	}
	return nil
}

// done reports whether the record was read without error and to its last byte.
func (d *decoder) done() bool {
	if d.err == nil && d.pos != len(d.src) {
		d.fail("", strconv.Itoa(len(d.src)-d.pos)+" bytes after the event")
	}
	return d.err == nil
}
