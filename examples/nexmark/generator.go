package nexmark

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unsafe"
)

// Generator produces the Nexmark event stream: event n (0, 1, 2, ...) is a pure function of the seed, the
// rate and the base time, so any subtask can generate its share, a checkpoint is the next n, and Go and
// Java (bench/flink's dev.runnel.bench.flink.nexmark.Generator) produce the same events byte for byte.
//
// The algorithm, with every rule and default (the Nexmark model's, as in the suite's Beam and Flink
// generators, except where marked "ours": those are changed so that every value is a pure function of n
// computed in integers only, which two languages can agree on exactly):
//
// Randomness (ours). Each event draws from its own SplitMix64 stream seeded with seed ^ n (state += 0x9e3779b97f4a7c15;
// z = (z ^ z>>30)·0xbf58476d1ce4e5b9; z = (z ^ z>>27)·0x94d049bb133111eb; z ^ z>>31). A draw below m
// (m > 0) is (next >>> 1) mod m, a non-negative int64; the draws happen in the order written below.
//
// Kind. n mod 50: 0 is a person, 1–3 an auction, 4–49 a bid (proportions 1:3:46 over a denominator of 50).
//
// Time. dateTime = baseTime + n·1000/rate milliseconds (integer division), baseTime 2015-07-15T00:00:00Z
// (1436918400000) by default, rate the configured events per second or, when unthrottled (rate 0), a
// nominal 10,000,000 (the events/s of the suite's 100 M runs). Events are in time order.
//
// Ids. epoch = n div 50, offset = n mod 50. The last person id (base 0) at n is epoch; the last auction id
// (base 0) is 3·(epoch−1)+2 before the epoch's auctions (offset 0), 3·epoch+offset−1 among them, and
// 3·epoch+2 after them. A person's id is 1000 + the last person id, an auction's 1000 + the last auction id
// (first person id 1000, first auction id 1000).
//
//   - A random person (base 0) is one of the 1000 most recent (numActivePeople 1000) or up to 10 ahead
//     (person id lead 10): with p = last+1 people so far and a = min(p, 1000), p − a + draw(a + 10).
//   - A random auction (base 0) is one of the 100 most recent (numInFlightAuctions 100) or up to 10 ahead
//     (auction id lead 10): with hi = last and lo = max(hi − 100, 0), lo + draw(hi − lo + 1 + 10).
//
// Person, in draw order. name: a first name (Peter Paul Luke John Saul Vicky Kate Julie Sarah Deiter Walter)
// + " " + a last name (Shultz Abrams Spencer White Bartels Walton Smith Jones Noris); emailAddress:
// string(7) + "@" + string(5) + ".com"; creditCard: four draw(10000)s, each as four digits, joined by
// spaces; city (Phoenix, Los Angeles, San Francisco, Boise, Portland, Bend, Redmond, Seattle, Kent,
// Cheyenne); state (AZ CA ID OR WA WY); extra: padding to an average of 200 bytes over a size of
// 8 + the lengths of the five strings.
//
// Auction, in draw order. seller: with draw(4) > 0 (a hot seller, 3 in 4) the first person of the last
// block of 100 people (hot seller ratio 100), (last person div 100)·100, else a random person; plus 1000.
// category: 10 + draw(5) (first category 10, 5 categories). initialBid: a price. expires: dateTime + an
// auction length. itemName: string(20); description: string(100); reserve: initialBid + a price; extra:
// padding to an average of 500 bytes over a size of 8 + len(itemName) + len(description) + 40.
//
// Auction length. 1 + draw(max(2·horizon, 1)) ms, horizon = time(n + 1666) − time(n), 1666 =
// 100·50/3 the events until 100 more auctions (numInFlightAuctions) are made. At the nominal 10 M events/s
// the horizon is 0 and every auction lasts 1 ms, as in the suite at that rate.
//
// Bid, in draw order. auction: with draw(2) > 0 (a hot auction, 1 in 2) (last auction div 100)·100 (hot
// auction ratio 100), else a random auction; plus 1000. bidder: with draw(4) > 0 (a hot bidder, 3 in 4)
// the second person of the last block of 100, (last person div 100)·100 + 1, else a random person; plus
// 1000 (once: the Flink suite's generator adds it twice, Beam's once). price: a price. channel and url:
// with draw(2) > 0 (hot channels ratio 2) hot channel draw(4) of Google, Facebook, Baidu, Apple with its
// fixed url, else channel-k for k = draw(10000) (10,000 channels) with its fixed url. extra: padding to an
// average of 100 bytes over a size of 32.
//
// Channel urls (ours: the suite draws them from an unseeded random per process). The url of hot channel i
// is a base url drawn from SplitMix64 seeded 0x686f7455524c ^ i; the url of channel-k a base url drawn
// from SplitMix64 seeded 0x6368616e6e656c ^ k, followed, when a further draw(10) > 0 (9 in 10), by
// "&channel_id=" and |int32 bit reversal of k| computed in 64 bits (so k = 1 gives 2147483648). A base url
// is "https://www.nexmark.com/" + three string(5, '_') separated by "/" + "/item.htm?query=1".
//
// Price (ours: the suite's round(100·10^(6u)) is floating point). A decade d = draw(6), then
// 100·10^d + draw(9·100·10^d): from 100 to 99,999,999 cents, each decade equally likely.
//
// string(m[, c]). Length 3 + draw(m − 3); each character is c (a space unless given) when draw(13) = 0,
// else 'a' + draw(26); leading and trailing spaces are then trimmed (not other special characters).
//
// Padding to an average of A bytes over a size S. Empty when S > A; else with D = A − S and
// delta = round(D/5) (as (2D+5) div 10), a length of D − delta + draw(2·delta) (D when delta is 0) of
// exact characters. Exact characters (ours: the suite takes 6 per 31-bit draw and can go below 'a') come
// 13 per draw: x = next >>> 1, then 'a' + x mod 26, x = x div 26, thirteen times.
//
// A Generator is not safe for concurrent use (it keeps the slab its strings are made in); each source
// subtask has its own.
type Generator struct {
	seed     uint64
	rate     int64 // events/s that spaces dateTime, never 0
	baseTime int64 // ms
	// slab is the block the strings of the events are made in: the bytes below len(slab) belong to
	// strings already handed out and are never written again; an event's strings are appended after them.
	// A full slab is dropped (the collector frees it when no string in it is referenced) and a new one
	// made, never an old one reused, so a string stays as it was for as long as anyone holds it.
	slab []byte
	// Each source subtask's Generator writes slab for every string it makes; the padding keeps the next
	// object in memory (often the Generator of the other subtask, made just after this one) off the cache
	// line of slab, which would otherwise move between the cores on every write.
	_ [64]byte
}

// slabBytes is the size of a slab: one allocation for the strings of about 180 events (the mean event has
// 89 bytes of them), and the most memory one retained string keeps alive.
const slabBytes = 16 << 10

// maxEventBytes bounds the bytes one event appends to its slab, the 3 bytes past the end that exact
// characters write included: a person's at most 14 + 15 + 19 + 182, an auction's 19 + 99 + 542, a bid's 81,
// each + 3. An event that found less room would only make append move the slab, which is correct too.
const maxEventBytes = 1 << 10

// room returns the slab with room for one event's strings.
func (g *Generator) room() []byte {
	if cap(g.slab)-len(g.slab) < maxEventBytes {
		g.slab = make([]byte, 0, slabBytes)
	}
	return g.slab
}

// carve returns b[start:] as a string without a copy, and keeps b (b is the slab, extended by room's
// caller) as the slab: the bytes of the string are below the new len(slab), so nothing writes them again.
func (g *Generator) carve(b []byte, start int) string {
	g.slab = b
	if len(b) == start {
		return ""
	}
	return unsafe.String(&b[start], len(b)-start)
}

// GeneratorConfig configures the event stream. The zero value is the default stream of the golden file:
// seed 0, nominal rate, the default base time.
type GeneratorConfig struct {
	// Seed is xor-ed with n to seed event n's random stream.
	Seed uint64
	// Rate is the stream's events per second over all subtasks: the source throttles to it and dateTime
	// advances by 1000/Rate ms per event. 0 runs unthrottled with the nominal NominalRate for timestamps.
	Rate int64
	// BaseTime is the dateTime of event 0 in epoch milliseconds; 0 means DefaultBaseTime.
	BaseTime int64
	// Events bounds the stream to events 0 … Events−1 over all subtasks; 0 means unbounded.
	Events uint64
}

// The generator's defaults.
const (
	// NominalRate is the events per second that space dateTime when the stream is unthrottled.
	NominalRate = 10_000_000
	// DefaultBaseTime is 2015-07-15T00:00:00Z in epoch milliseconds: a fixed date, so every run
	// generates the same events.
	DefaultBaseTime = 1436918400000
)

// validate names the first bad setting.
func (c GeneratorConfig) validate() error {
	if c.Rate < 0 {
		return fmt.Errorf("nexmark generator: negative rate %d", c.Rate)
	}
	if c.BaseTime < 0 {
		return fmt.Errorf("nexmark generator: negative base time %d", c.BaseTime)
	}
	return nil
}

// NewGenerator returns a generator of the stream cfg describes (cfg.Events is the source's business and
// ignored here).
func NewGenerator(cfg GeneratorConfig) (*Generator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Generator{seed: cfg.Seed, rate: cfg.Rate, baseTime: cfg.BaseTime}
	if g.rate == 0 {
		g.rate = NominalRate
	}
	if g.baseTime == 0 {
		g.baseTime = DefaultBaseTime
	}
	return g, nil
}

// Time returns the dateTime of event n in epoch milliseconds. n·1000 must fit in an int64: n below
// 9.2·10^15, 29 years of events at the nominal rate.
func (g *Generator) Time(n uint64) int64 {
	return g.baseTime + int64(n)*1000/g.rate
}

// The model's constants (see the Generator's doc).
const (
	proportionDenominator = 50
	personProportion      = 1
	auctionProportion     = 3
	firstPersonID         = 1000
	firstAuctionID        = 1000
	firstCategoryID       = 10
	numCategories         = 5
	numActivePeople       = 1000
	numInFlightAuctions   = 100
	personIDLead          = 10
	auctionIDLead         = 10
	hotSellersRatio       = 4 // 1 − 1/4 of auctions are by a hot seller
	hotAuctionRatio       = 2 // 1 − 1/2 of bids are on a hot auction
	hotBiddersRatio       = 4 // 1 − 1/4 of bids are by a hot bidder
	hotChannelsRatio      = 2 // 1 − 1/2 of bids come through a hot channel
	hotBlock              = 100
	channels              = 10_000
	avgPersonBytes        = 200
	avgAuctionBytes       = 500
	avgBidBytes           = 100
	hotURLSeed            = 0x686f7455524c   // "hotURL"
	channelURLSeed        = 0x6368616e6e656c // "channel"
)

var (
	firstNames = [...]string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames  = [...]string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	cities     = [...]string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	states     = [...]string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	hotNames   = [...]string{"Google", "Facebook", "Baidu", "Apple"}
)

// splitMix is SplitMix64: a 64-bit state advanced by the golden gamma and mixed on output.
type splitMix struct{ s uint64 }

func (r *splitMix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// draw returns a value in [0, m) for m > 0: the top 63 bits of a draw modulo m (the bias is below 2^-40
// for every m the model uses). Both operands are non-negative, so the unsigned remainder (the cheaper
// instruction) is the signed one.
func (r *splitMix) draw(m int64) int64 { return int64((r.next() >> 1) % uint64(m)) }

// Event fills ev with event n. Its strings are made in a block of memory shared with the strings of the
// events made before and after it (16 KB in all, about 180 events): a string of the event that is kept
// keeps that block alive, so a job that keeps the strings of a few events among many for long should keep
// copies of them (strings.Clone). The strings are never written once made.
func (g *Generator) Event(n uint64, ev *Event) {
	kind := kindOf(n)
	for k := KindPerson; k <= KindBid; k++ {
		if k != kind {
			ev.clearValue(k)
		}
	}
	g.make(n, kind, ev)
}

// refill fills ev, which holds an event this package made (only the value of its Kind is set, as in a
// zero Event), with event n, as Event does: it zeroes the value of ev's kind only when n's differs, and
// looks at no other. A bid follows a bid 46 times in 50.
func (g *Generator) refill(n uint64, ev *Event) {
	kind := kindOf(n)
	if ev.Kind != kind {
		ev.clearValue(ev.Kind)
	}
	g.make(n, kind, ev)
}

// kindOf is the kind of event n.
func kindOf(n uint64) Kind {
	switch off := n % proportionDenominator; {
	case off < personProportion:
		return KindPerson
	case off < personProportion+auctionProportion:
		return KindAuction
	}
	return KindBid
}

// make sets ev's kind and fills its value of that kind with event n; it leaves the other two.
func (g *Generator) make(n uint64, kind Kind, ev *Event) {
	r := splitMix{g.seed ^ n}
	ts := g.Time(n)
	ev.Kind = kind
	switch kind {
	case KindPerson:
		g.person(n, &r, ts, &ev.Person)
	case KindAuction:
		g.auction(n, &r, ts, &ev.Auction)
	default:
		g.bid(n, &r, ts, &ev.Bid)
	}
}

// clearValue zeroes ev's value of kind k unless it is zero already: a store of a struct with strings into
// the heap costs write barriers while the collector marks, a comparison costs none.
func (ev *Event) clearValue(k Kind) {
	switch k {
	case KindPerson:
		clearZero(&ev.Person)
	case KindAuction:
		clearZero(&ev.Auction)
	case KindBid:
		clearZero(&ev.Bid)
	}
}

func clearZero[T Person | Auction | Bid](v *T) {
	var zero T
	if *v != zero {
		*v = zero
	}
}

// lastPerson is the base-0 id of the last person made at or before event n.
func lastPerson(n uint64) int64 {
	return int64(n / proportionDenominator)
}

// lastAuction is the base-0 id of the last auction made at or before event n (−1 before the first).
func lastAuction(n uint64) int64 {
	epoch, off := int64(n/proportionDenominator), int64(n%proportionDenominator)
	switch {
	case off < personProportion:
		return (epoch-1)*auctionProportion + auctionProportion - 1
	case off >= personProportion+auctionProportion:
		return epoch*auctionProportion + auctionProportion - 1
	}
	return epoch*auctionProportion + off - personProportion
}

func randomPerson(n uint64, r *splitMix) int64 {
	people := lastPerson(n) + 1
	active := min(people, numActivePeople)
	return people - active + r.draw(active+personIDLead)
}

func randomAuction(n uint64, r *splitMix) int64 {
	hi := lastAuction(n)
	lo := max(hi-numInFlightAuctions, 0)
	return lo + r.draw(hi-lo+1+auctionIDLead)
}

func nextPrice(r *splitMix) int64 {
	lo := int64(100)
	for d := r.draw(6); d > 0; d-- {
		lo *= 10
	}
	return lo + r.draw(9*lo)
}

// appendString appends string(m, special) and returns the extended buffer.
func appendString(b []byte, r *splitMix, m int64, special byte) []byte {
	start := len(b)
	l := int(3 + r.draw(m-3))
	b = slices.Grow(b, l)[:start+l]
	for i := range b[start:] {
		if r.draw(13) == 0 {
			b[start+i] = special
		} else {
			b[start+i] = byte('a' + r.draw(26))
		}
	}
	if special != ' ' {
		return b
	}
	// Trim: shift the kept run to start.
	s := b[start:]
	i, j := 0, len(s)
	for i < j && s[i] == ' ' {
		i++
	}
	for j > i && s[j-1] == ' ' {
		j--
	}
	n := copy(s, s[i:j])
	return b[:start+n]
}

// appendExact appends l exact characters.
func appendExact(b []byte, r *splitMix, l int64) []byte {
	if l <= 0 {
		return b
	}
	// Each draw writes 16 bytes (13 characters and 3 the next draw or the final length overwrites), so
	// the buffer holds l rounded up to draws, plus 3.
	start := len(b)
	b = slices.Grow(b, int(l)+exactPerDraw+3)
	w := b[start : start+int(l)+exactPerDraw+3]
	for i := 0; i < int(l); i += exactPerDraw {
		putExact(w[i:i+16], r.next()>>1)
	}
	return b[:start+int(l)]
}

// exactPerDraw is how many exact characters one draw makes.
const exactPerDraw = 13

// exactPairs[v] for v < 26² is the two exact characters of v, 'a' + v mod 26 then 'a' + v div 26, as a
// little-endian uint16.
var exactPairs = func() (t [26 * 26]uint16) {
	for v := range t {
		t[v] = uint16('a'+v%26) | uint16('a'+v/26)<<8
	}
	return t
}()

// putExact writes the 13 exact characters of a draw x < 2^63 to w[:13] (and whatever to w[13:16]):
// character k is 'a' + (x div 26^k) mod 26. Splitting x = hi·26^6 + lo (lo < 26^6) gives the same
// characters, those of lo for k < 6 (x div 26^k = hi·26^(6−k) + lo div 26^k, and 26 divides the first
// term) and those of hi for k ≥ 6 (x div 26^k = hi div 26^(k−6), as lo < 26^6); each part is then taken
// two characters (a digit base 26² = 676) at a time from the table. Two short chains of divisions by
// constants instead of one of thirteen.
func putExact(w []byte, x uint64) {
	const d6 = 26 * 26 * 26 * 26 * 26 * 26
	lo, hi := uint32(x%d6), x/d6 // hi < 2^63 / 26^6 < 2^35
	l1 := lo / 676
	h1 := uint32(hi / 676) // < 2^26
	h2 := h1 / 676
	p := &exactPairs
	binary.LittleEndian.PutUint64(w[0:8], uint64(p[lo%676])|uint64(p[l1%676])<<16|uint64(p[l1/676])<<32|
		uint64(p[hi%676])<<48)
	binary.LittleEndian.PutUint64(w[8:16], uint64(p[h1%676])|uint64(p[h2%676])<<16|uint64('a'+h2/676%26)<<32)
}

// appendExtra appends padding to an average of avg bytes over size.
func appendExtra(b []byte, r *splitMix, size, avg int64) []byte {
	if size > avg {
		return b
	}
	d := avg - size
	delta := (2*d + 5) / 10
	l := d - delta
	if delta > 0 {
		l += r.draw(2 * delta)
	}
	return appendExact(b, r, l)
}

func (g *Generator) person(n uint64, r *splitMix, ts int64, p *Person) {
	b := g.room()
	start := len(b)
	b = append(b, firstNames[r.draw(int64(len(firstNames)))]...)
	b = append(b, ' ')
	b = append(b, lastNames[r.draw(int64(len(lastNames)))]...)
	name := len(b) - start
	b = appendString(b, r, 7, ' ')
	b = append(b, '@')
	b = appendString(b, r, 5, ' ')
	b = append(b, ".com"...)
	email := len(b) - start
	for i := range 4 {
		if i > 0 {
			b = append(b, ' ')
		}
		v := r.draw(10000)
		b = append(b, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
	}
	card := len(b) - start
	city := cities[r.draw(int64(len(cities)))]
	state := states[r.draw(int64(len(states)))]
	b = appendExtra(b, r, int64(8+card+len(city)+len(state)), avgPersonBytes)
	s := g.carve(b, start)
	*p = Person{ID: lastPerson(n) + firstPersonID, Name: s[:name], EmailAddress: s[name:email],
		CreditCard: s[email:card], City: city, State: state, DateTime: ts, Extra: s[card:]}
}

func (g *Generator) auction(n uint64, r *splitMix, ts int64, a *Auction) {
	var seller int64
	if r.draw(hotSellersRatio) > 0 {
		seller = lastPerson(n) / hotBlock * hotBlock
	} else {
		seller = randomPerson(n, r)
	}
	category := firstCategoryID + r.draw(numCategories)
	initialBid := nextPrice(r)
	horizon := g.Time(n+numInFlightAuctions*proportionDenominator/auctionProportion) - ts
	expires := ts + 1 + r.draw(max(2*horizon, 1))
	b := g.room()
	start := len(b)
	b = appendString(b, r, 20, ' ')
	item := len(b) - start
	b = appendString(b, r, 100, ' ')
	desc := len(b) - start
	reserve := initialBid + nextPrice(r)
	b = appendExtra(b, r, int64(8+desc+40), avgAuctionBytes)
	s := g.carve(b, start)
	*a = Auction{ID: lastAuction(n) + firstAuctionID, ItemName: s[:item], Description: s[item:desc],
		InitialBid: initialBid, Reserve: reserve, DateTime: ts, Expires: expires,
		Seller: seller + firstPersonID, Category: category, Extra: s[desc:]}
}

func (g *Generator) bid(n uint64, r *splitMix, ts int64, bd *Bid) {
	var auction, bidder int64
	if r.draw(hotAuctionRatio) > 0 {
		auction = lastAuction(n) / hotBlock * hotBlock
	} else {
		auction = randomAuction(n, r)
	}
	if r.draw(hotBiddersRatio) > 0 {
		bidder = lastPerson(n)/hotBlock*hotBlock + 1
	} else {
		bidder = randomPerson(n, r)
	}
	price := nextPrice(r)
	var ch *channel
	if r.draw(hotChannelsRatio) > 0 {
		ch = &channelTable().hot[r.draw(int64(len(hotNames)))]
	} else {
		ch = &channelTable().all[r.draw(channels)]
	}
	b := g.room()
	extra := g.carve(appendExtra(b, r, 32, avgBidBytes), len(b))
	*bd = Bid{Auction: auction + firstAuctionID, Bidder: bidder + firstPersonID, Price: price,
		Channel: ch.name, URL: ch.url, DateTime: ts, Extra: extra}
}

// channel is a bid's channel and its url.
type channel struct{ name, url string }

// channels holds the 4 hot channels and the 10,000 others, made once per process (about 1 MB) so that a
// bid's channel and url cost no allocation.
type channelSet struct {
	hot [len(hotNames)]channel
	all []channel
}

var channelTable = sync.OnceValue(func() *channelSet {
	cs := &channelSet{all: make([]channel, channels)}
	for i, name := range hotNames {
		r := splitMix{hotURLSeed ^ uint64(i)}
		cs.hot[i] = channel{name: name, url: string(appendBaseURL(nil, &r))}
	}
	for k := range cs.all {
		r := splitMix{channelURLSeed ^ uint64(k)}
		b := appendBaseURL(nil, &r)
		if r.draw(10) > 0 {
			rev := int64(int32(bits.Reverse32(uint32(k))))
			if rev < 0 {
				rev = -rev
			}
			b = append(b, "&channel_id="...)
			b = strconv.AppendInt(b, rev, 10)
		}
		cs.all[k] = channel{name: "channel-" + strconv.Itoa(k), url: string(b)}
	}
	return cs
})

func appendBaseURL(b []byte, r *splitMix) []byte {
	b = append(b, "https://www.nexmark.com/"...)
	for range 3 {
		b = appendString(b, r, 5, '_')
		b = append(b, '/')
	}
	return append(b, "item.htm?query=1"...)
}
