// Package nexmark is the Nexmark benchmark in Runnel: the events (Person, Auction, Bid), their
// codec, the deterministic generator of the suite as a Runnel source, and the JSON lines format the suite's
// input and output files use (a reader as a source, and an allocation-free writer).
//
// The generator is one documented algorithm (see Generator) that bench/flink ports to Java event for event;
// testdata/generator-1000.jsonl pins both. On top of the data, the package has the suite's queries
// (Queries: q0 to q9 and q11 to q22) as jobs (Build, docs/eventtime.md §10.4) and the bundled example
// that runs them (Job: `runnel run nexmark`); `runnel bench nexmark` measures them.
//
// Like every example it is built on the public API (runnel, codec, connector) only and must not import
// Runnel's internal packages.
package nexmark

import "strconv"

// Kind says which of an Event's three values is set.
type Kind uint8

// The kinds of event, in the order of their byte in the codec's encoding.
const (
	KindPerson Kind = iota
	KindAuction
	KindBid
)

// String returns the kind's JSON key: "person", "auction" or "bid".
func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Person is a new user of the auction site. DateTime is in epoch milliseconds.
type Person struct {
	ID           int64
	Name         string
	EmailAddress string
	CreditCard   string
	City         string
	State        string
	DateTime     int64
	Extra        string
}

// Auction is a new item for sale. DateTime and Expires are in epoch milliseconds; Seller is a Person's ID.
type Auction struct {
	ID          int64
	ItemName    string
	Description string
	InitialBid  int64
	Reserve     int64
	DateTime    int64
	Expires     int64
	Seller      int64
	Category    int64
	Extra       string
}

// Bid is a bid on an auction. Auction is an Auction's ID, Bidder a Person's; Price is in cents; DateTime is
// in epoch milliseconds.
type Bid struct {
	Auction  int64
	Bidder   int64
	Price    int64
	Channel  string
	URL      string
	DateTime int64
	Extra    string
}

// Event is one record of the Nexmark stream: Kind says which of Person, Auction and Bid holds it; the other
// two are zero. It is a struct rather than an interface so that a batch of events is one flat slice and a
// decoded event costs no allocation beyond its strings.
type Event struct {
	Kind    Kind
	Person  Person
	Auction Auction
	Bid     Bid
}

// DateTime returns the event's time in epoch milliseconds, whichever its kind.
func (e *Event) DateTime() int64 {
	switch e.Kind {
	case KindPerson:
		return e.Person.DateTime
	case KindAuction:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}
