package nexmark

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/runnel-dev/runnel"
)

// MaxLineBytes bounds one line of a JSON lines input (the generator's longest is under 1 KB); a longer
// line is an error naming it, not a growing buffer.
const MaxLineBytes = 1 << 20

// The JSON shapes of the input. Every field is a pointer so that a missing one is told apart from a zero.
type (
	jsonPerson struct {
		ID           *int64  `json:"id"`
		Name         *string `json:"name"`
		EmailAddress *string `json:"emailAddress"`
		CreditCard   *string `json:"creditCard"`
		City         *string `json:"city"`
		State        *string `json:"state"`
		DateTime     *int64  `json:"dateTime"`
		Extra        *string `json:"extra"`
	}
	jsonAuction struct {
		ID          *int64  `json:"id"`
		ItemName    *string `json:"itemName"`
		Description *string `json:"description"`
		InitialBid  *int64  `json:"initialBid"`
		Reserve     *int64  `json:"reserve"`
		DateTime    *int64  `json:"dateTime"`
		Expires     *int64  `json:"expires"`
		Seller      *int64  `json:"seller"`
		Category    *int64  `json:"category"`
		Extra       *string `json:"extra"`
	}
	jsonBid struct {
		Auction  *int64  `json:"auction"`
		Bidder   *int64  `json:"bidder"`
		Price    *int64  `json:"price"`
		Channel  *string `json:"channel"`
		URL      *string `json:"url"`
		DateTime *int64  `json:"dateTime"`
		Extra    *string `json:"extra"`
	}
	jsonLine struct {
		Person  *jsonPerson  `json:"person"`
		Auction *jsonAuction `json:"auction"`
		Bid     *jsonBid     `json:"bid"`
	}
)

// LineDecoder parses the lines of a JSON lines input into events, reusing its parse value from line to
// line. Each line is one object with exactly one key, person, auction or bid, whose value has exactly the
// model's fields (integers for the int64 ones, dateTime and expires in epoch milliseconds); an unknown,
// missing or repeated field, a second key, a null, or anything after the object is an error. Keys are
// matched exactly (encoding/json alone would take "ID" for "id": a second pass over the tokens checks them).
type LineDecoder struct {
	v       jsonLine
	missing []string
}

// Decode parses one line (without its newline) into e.
func (d *LineDecoder) Decode(line []byte, e *Event) error {
	if len(bytes.TrimSpace(line)) == 0 {
		return errors.New("empty line")
	}
	d.v = jsonLine{}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d.v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more after the object")
	}
	keys := 0
	for _, set := range []bool{d.v.Person != nil, d.v.Auction != nil, d.v.Bid != nil} {
		if set {
			keys++
		}
	}
	if keys != 1 {
		return fmt.Errorf("want exactly one of the keys person, auction, bid, have %d", keys)
	}
	if err := checkKeys(line); err != nil {
		return err
	}
	d.missing = d.missing[:0]
	switch {
	case d.v.Person != nil:
		p := d.v.Person
		*e = Event{Kind: KindPerson, Person: Person{ID: d.int("id", p.ID), Name: d.str("name", p.Name),
			EmailAddress: d.str("emailAddress", p.EmailAddress), CreditCard: d.str("creditCard", p.CreditCard),
			City: d.str("city", p.City), State: d.str("state", p.State), DateTime: d.int("dateTime", p.DateTime),
			Extra: d.str("extra", p.Extra)}}
	case d.v.Auction != nil:
		a := d.v.Auction
		*e = Event{Kind: KindAuction, Auction: Auction{ID: d.int("id", a.ID), ItemName: d.str("itemName", a.ItemName),
			Description: d.str("description", a.Description), InitialBid: d.int("initialBid", a.InitialBid),
			Reserve: d.int("reserve", a.Reserve), DateTime: d.int("dateTime", a.DateTime),
			Expires: d.int("expires", a.Expires), Seller: d.int("seller", a.Seller),
			Category: d.int("category", a.Category), Extra: d.str("extra", a.Extra)}}
	default:
		b := d.v.Bid
		*e = Event{Kind: KindBid, Bid: Bid{Auction: d.int("auction", b.Auction), Bidder: d.int("bidder", b.Bidder),
			Price: d.int("price", b.Price), Channel: d.str("channel", b.Channel), URL: d.str("url", b.URL),
			DateTime: d.int("dateTime", b.DateTime), Extra: d.str("extra", b.Extra)}}
	}
	if len(d.missing) > 0 {
		return fmt.Errorf("%s: missing field %s", e.Kind, strings.Join(d.missing, ", "))
	}
	return nil
}

// fieldNames are the model's JSON keys per kind, in the writer's order.
var fieldNames = map[string][]string{
	"person":  {"id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra"},
	"auction": {"id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller", "category", "extra"},
	"bid":     {"auction", "bidder", "price", "channel", "url", "dateTime", "extra"},
}

// checkKeys walks the tokens of a line that encoding/json has accepted (one object of one object of
// scalars) and refuses keys that match the model's only without regard to case, and repeated keys.
func checkKeys(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	kind, _ := tok.(string)
	names, ok := fieldNames[kind]
	if !ok {
		return fmt.Errorf("unknown key %q, want person, auction or bid", kind)
	}
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	var seen uint16 // one bit per field of names (at most 10)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		i := slices.Index(names, key)
		if i < 0 {
			return fmt.Errorf("%s: unknown field %q", kind, key)
		}
		if seen&(1<<i) != 0 {
			return fmt.Errorf("%s: repeated field %q", kind, key)
		}
		seen |= 1 << i
		if _, err := dec.Token(); err != nil { // the value: a scalar, as the first pass checked
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return err
	}
	if dec.More() {
		return errors.New("want exactly one of the keys person, auction, bid, have more")
	}
	return nil
}

func (d *LineDecoder) int(name string, v *int64) int64 {
	if v == nil {
		d.missing = append(d.missing, name)
		return 0
	}
	return *v
}

func (d *LineDecoder) str(name string, v *string) string {
	if v == nil {
		d.missing = append(d.missing, name)
		return ""
	}
	return *v
}

// JSONFile returns a source of the events of a JSON lines file (see LineDecoder). Subtask 0 reads the
// whole file in order and the others end at once: give the source parallelism 1 and rebalance after it.
// Its checkpointed state is the byte offset and the number of the next line, so a restore seeks back
// exactly and errors keep naming the right line.
func JSONFile(path string) runnel.Source[Event] { return &jsonFile{path: path} }

type jsonFile struct{ path string }

func (s *jsonFile) CreateReader(ctx runnel.RuntimeContext) (runnel.SourceReader[Event], error) {
	if ctx.SubtaskIndex() > 0 {
		return &jsonReader{path: s.path, idle: true}, nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("nexmark json source: %w", err)
	}
	return &jsonReader{path: s.path, f: f, br: bufio.NewReaderSize(f, 64<<10), line: 1}, nil
}

type jsonReader struct {
	path   string
	idle   bool // a subtask other than 0: no input
	f      *os.File
	br     *bufio.Reader
	offset int64  // of the next line
	line   int64  // number of the next line, from 1
	long   []byte // a line longer than the bufio buffer, assembled
	dec    LineDecoder
	buf    []Event
}

// readLine returns the next line without its terminator ("\n" or "\r\n"), io.EOF at the end. The last line
// need not end in a newline.
func (r *jsonReader) readLine() ([]byte, error) {
	r.long = r.long[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.offset += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(r.long)+len(chunk) > MaxLineBytes {
				return nil, fmt.Errorf("%s: line %d: longer than %d bytes", r.path, r.line, MaxLineBytes)
			}
			r.long = append(r.long, chunk...)
			continue
		}
		if err == io.EOF && len(chunk) == 0 && len(r.long) == 0 {
			return nil, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s: line %d: %w", r.path, r.line, err)
		}
		if len(r.long) > 0 {
			chunk = append(r.long, chunk...)
			r.long = chunk
		}
		if len(chunk) > MaxLineBytes {
			return nil, fmt.Errorf("%s: line %d: longer than %d bytes", r.path, r.line, MaxLineBytes)
		}
		chunk = bytes.TrimSuffix(chunk, []byte("\n"))
		chunk = bytes.TrimSuffix(chunk, []byte("\r"))
		return chunk, nil
	}
}

// PollNext implements runnel.SourceReader: up to pollEvents events per poll.
func (r *jsonReader) PollNext(out runnel.Collector[Event]) (runnel.InputStatus, error) {
	if r.idle {
		return runnel.EndOfInput, nil
	}
	if cap(r.buf) < pollEvents {
		r.buf = make([]Event, pollEvents)
	}
	buf := r.buf[:0]
	status := runnel.MoreAvailable
	for len(buf) < pollEvents {
		line, err := r.readLine()
		if err == io.EOF {
			status = runnel.EndOfInput
			break
		}
		if err != nil {
			return 0, fmt.Errorf("nexmark json source: %w", err)
		}
		buf = buf[:len(buf)+1]
		if err := r.dec.Decode(line, &buf[len(buf)-1]); err != nil {
			return 0, fmt.Errorf("nexmark json source: %s: line %d: %w", r.path, r.line, err)
		}
		r.line++
	}
	if bc, ok := out.(runnel.BatchCollector[Event]); ok {
		bc.CollectBatch(buf)
	} else {
		for i := range buf {
			out.Collect(buf[i])
		}
	}
	return status, nil
}

// Available implements runnel.SourceReader; a file is always available.
func (r *jsonReader) Available() <-chan struct{} { return nil }

// ReplaysDeterministically implements runnel.DeterministicReader: the file's events in file order.
func (r *jsonReader) ReplaysDeterministically() bool { return true }

// SnapshotState implements runnel.CheckpointedReader: the offset and the number of the next line.
func (r *jsonReader) SnapshotState(int64) ([]byte, error) {
	return binary.AppendUvarint(binary.AppendUvarint(nil, uint64(r.offset)), uint64(r.line)), nil
}

// RestoreState implements runnel.CheckpointedReader: seeks to the restored offset.
func (r *jsonReader) RestoreState(b []byte) error {
	off, n := binary.Uvarint(b)
	line, m := 0, 0
	if n > 0 {
		var l uint64
		l, m = binary.Uvarint(b[n:])
		line = int(l)
	}
	if n <= 0 || m <= 0 || n+m != len(b) || line < 1 || off > 1<<62 {
		return fmt.Errorf("nexmark json source: %s: bad checkpointed position % x", r.path, b)
	}
	if r.idle {
		return nil
	}
	st, err := r.f.Stat()
	if err != nil {
		return fmt.Errorf("nexmark json source: %w", err)
	}
	if int64(off) > st.Size() {
		return fmt.Errorf("nexmark json source: %s: checkpointed offset %d is past the end of the file (%d bytes)", r.path, off, st.Size())
	}
	if _, err := r.f.Seek(int64(off), io.SeekStart); err != nil {
		return fmt.Errorf("nexmark json source: %w", err)
	}
	r.br.Reset(r.f)
	r.offset, r.line = int64(off), int64(line)
	return nil
}

// Close implements runnel.SourceReader.
func (r *jsonReader) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}
