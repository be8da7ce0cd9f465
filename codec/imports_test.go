package codec

import (
	"testing"
)

func TestConcurrentUse(t *testing.T) {
	c := MustStruct[record]()
	v := sampleRecord()
	want, _ := c.Append(nil, v)
	done := make(chan error)
	for range 4 {
		go func() {
			var err error
			buf := make([]byte, 0, len(want))
			for range 200 {
				var got record
				buf, _ = c.Append(buf[:0], v)
				if err = c.Decode(buf, &got); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
