package codec_test

import (
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/codec"
)

type Click struct {
	UserID int64
	At     time.Time // encodes itself: time.Time implements AppendBinary and UnmarshalBinary
	URL    string
	tags   []string // unexported fields are encoded too
}

func ExampleStruct() {
	c := codec.MustStruct[Click]()
	buf, err := c.Append(nil, Click{UserID: 7, At: time.Unix(0, 0).UTC(), URL: "/home", tags: []string{"new"}})
	if err != nil {
		panic(err)
	}
	var got Click
	if err := c.Decode(buf, &got); err != nil {
		panic(err)
	}
	fmt.Println(got.UserID, got.At.Unix(), got.URL, got.tags)
	// Output: 7 0 /home [new]
}

func ExampleFor() {
	type Session struct {
		ID    string
		Pages map[string]int
	}
	_, err := codec.For[Session]()
	fmt.Println(err)
	// Output: codec.For[codec_test.Session]: field Pages (map[string]int): unsupported kind map; implement encoding.BinaryAppender/BinaryUnmarshaler or a custom Codec
}

func ExamplePair() {
	c := codec.Pair(codec.String(), codec.Int64())
	buf, _ := c.Append(nil, codec.Tuple2[string, int64]{F0: "user-1", F1: 3})
	fmt.Printf("% x\n", buf)
	// Output: 06 75 73 65 72 2d 31 03 00 00 00 00 00 00 00
}
