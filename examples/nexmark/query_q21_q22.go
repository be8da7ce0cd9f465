package nexmark

import (
	"strings"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/codec"
)

// channelBid is q21's row.
type channelBid struct {
	Auction, Bidder, Price int64
	Channel, ChannelID     string
}

// hotChannelIDs are q21's fixed ids of the four hot channels, by their name in lower case.
var hotChannelIDs = [...]struct{ name, id string }{{"apple", "0"}, {"google", "1"}, {"facebook", "2"}, {"baidu", "3"}}

// channelID is q21's channel_id of a bid: a hot channel's fixed id (the channel compared in lower case,
// Unicode simple case folding standing in for Flink SQL's LOWER), else the value of the url's parameter
// channel_id (REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2): the first "channel_id=" at the url's
// start or after a '&', up to the next '&'); ok is false when there is neither. The id is a substring of
// url or a constant: nothing is allocated.
func channelID(channel, url string) (id string, ok bool) {
	for _, h := range hotChannelIDs {
		if strings.EqualFold(channel, h.name) {
			return h.id, true
		}
	}
	const param = "channel_id="
	for from := 0; ; {
		i := strings.Index(url[from:], param)
		if i < 0 {
			return "", false
		}
		i += from
		if i == 0 || url[i-1] == '&' {
			v := url[i+len(param):]
			if end := strings.IndexByte(v, '&'); end >= 0 {
				v = v[:end]
			}
			return v, true
		}
		from = i + 1
	}
}

// q21 adds a channel id to the bids that have one: {auction, bidder, price, channel, channel_id}, for the
// four hot channels their fixed id ('0' apple, '1' google, '2' facebook, '3' baidu), else the url's
// channel_id parameter; bids with neither are dropped.
func q21(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b Bid) (channelBid, bool) {
		id, ok := channelID(b.Channel, b.URL)
		return channelBid{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, Channel: b.Channel, ChannelID: id}, ok
	}).WithCodec(codec.MustStruct[channelBid]())
	return newResult(s, func(dst []byte, r *channelBid) []byte {
		o := BeginObject(dst)
		o.Int("auction", r.Auction)
		o.Int("bidder", r.Bidder)
		o.Int("price", r.Price)
		o.String("channel", r.Channel)
		o.String("channel_id", r.ChannelID)
		return o.End()
	})
}

// urlDirs is q22's row; Has says which of the three directories the url has (bit i for Dirs[i]).
type urlDirs struct {
	Auction, Bidder, Price int64
	Channel                string
	Dirs                   [3]string
	Has                    uint8
}

// splitIndexes sets pieces[i] to Flink SQL's SPLIT_INDEX(s, sep, first+i) for a one-byte separator (the
// (first+i)-th, from 0, of the pieces of s between separators, empty pieces included) and bit i of has
// when that piece exists: not past the last piece (SQL NULL), and never for an empty s, which has no
// pieces. One scan of s for all of them; the pieces are substrings of s.
func splitIndexes(s string, sep byte, first int, pieces []string) (has uint8) {
	if s == "" {
		return 0
	}
	for ; first > 0; first-- {
		i := strings.IndexByte(s, sep)
		if i < 0 {
			return 0
		}
		s = s[i+1:]
	}
	for j := range pieces {
		has |= 1 << j
		i := strings.IndexByte(s, sep)
		if i < 0 {
			pieces[j] = s
			return has
		}
		pieces[j], s = s[:i], s[i+1:]
	}
	return has
}

// q22 splits each bid's url on '/' into the directories after the host: {auction, bidder, price,
// channel, dir1, dir2, dir3}, SPLIT_INDEX(url, '/', 3), 4 and 5 (null past the url's last piece).
func q22(events *runnel.Stream[Event]) Result {
	s := bids(events, func(b Bid) (urlDirs, bool) {
		r := urlDirs{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, Channel: b.Channel}
		r.Has = splitIndexes(b.URL, '/', 3, r.Dirs[:])
		return r, true
	}).WithCodec(codec.MustStruct[urlDirs]())
	return newResult(s, func(dst []byte, r *urlDirs) []byte {
		o := BeginObject(dst)
		o.Int("auction", r.Auction)
		o.Int("bidder", r.Bidder)
		o.Int("price", r.Price)
		o.String("channel", r.Channel)
		for i, name := range [...]string{"dir1", "dir2", "dir3"} {
			if r.Has&(1<<i) != 0 {
				o.String(name, r.Dirs[i])
			} else {
				o.key(name)
				o.b = append(o.b, "null"...)
			}
		}
		return o.End()
	})
}
