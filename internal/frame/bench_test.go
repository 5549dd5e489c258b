package frame

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// BenchmarkReadWrite writes a frame and reads it back through an
// in-memory buffer. The io.Copy case moves the same payload bytes through
// the same buffer into a reused slice with no framing, in the same run, so
// the ratio between the two is the cost of the codec whatever the machine.
func BenchmarkReadWrite(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10} {
		payload := bytes.Repeat([]byte{'p'}, size)
		b.Run(fmt.Sprintf("frame/%d", size), func(b *testing.B) {
			var buf bytes.Buffer
			r := NewReader(&buf, 0)
			f := Frame{ExecuteRequest, payload}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := Write(&buf, f); err != nil {
					b.Fatal(err)
				}
				if _, err := r.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("io.Copy/%d", size), func(b *testing.B) {
			var buf bytes.Buffer
			dst := &sliceWriter{b: make([]byte, 0, size)}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				buf.Write(payload)
				dst.b = dst.b[:0]
				if _, err := io.Copy(dst, &buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sliceWriter copies what it is given into a reused slice, as Reader does
// with a payload; io.Discard would let io.Copy skip the copy.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
