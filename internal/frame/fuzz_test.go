package frame

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// fuzzMax is small so that arbitrary inputs reach the oversized path.
const fuzzMax = 64

// FuzzReader feeds arbitrary bytes to a Reader. It checks that Next never
// panics, that every error is one of the documented kinds, and that every
// frame returned re-encodes to bytes a fresh Reader reads back identically.
func FuzzReader(f *testing.F) {
	for _, g := range goldenFrames {
		f.Add(Append(nil, g.f))
	}
	f.Add(stream(Frame{Ping, nil}, Frame{Pong, []byte("{}")}))
	f.Add(Append(nil, Frame{PushEvent, bytes.Repeat([]byte{'p'}, fuzzMax+1)}))
	f.Add([]byte{0, 0, 0, 0, 2, 'x', 'y', byte(Ping), 0, 0, 0, 0})
	f.Add([]byte(`{"jsonrpc":"2.0","method":"ping","id":1}`))
	f.Add([]byte{byte(Ping), 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in), fuzzMax)
		for range len(in) + 1 { // every call consumes at least a header or ends
			fr, err := r.Next()
			var tl *TooLargeError
			var ut *UnknownTypeError
			switch {
			case err == nil:
				if !fr.Type.Valid() || len(fr.Payload) > fuzzMax {
					t.Fatalf("Next() = %s with %d bytes, nil error", fr.Type, len(fr.Payload))
				}
				enc := Append(nil, fr)
				back, err := NewReader(bytes.NewReader(enc), fuzzMax).Next()
				if err != nil || back.Type != fr.Type || !bytes.Equal(back.Payload, fr.Payload) {
					t.Fatalf("re-encoded %s %q read back as %s %q, %v", fr.Type, fr.Payload, back.Type, back.Payload, err)
				}
			case errors.As(err, &tl):
				if !tl.Type.Valid() || int(tl.Length) <= fuzzMax || tl.Max != fuzzMax || fr.Type != tl.Type || fr.Payload != nil {
					t.Fatalf("inconsistent %+v with frame %s %q", *tl, fr.Type, fr.Payload)
				}
			case errors.As(err, &ut):
				if Type(ut.Tag).Valid() || ut.Skipped != (int(ut.Length) <= fuzzMax) {
					t.Fatalf("inconsistent %+v", *ut)
				}
				if !ut.Skipped {
					return // sticky: the stream is out of sync
				}
			case err == io.EOF, err == io.ErrUnexpectedEOF:
				return
			default:
				t.Fatalf("Next() error = %v (%T), not a documented kind", err, err)
			}
		}
		t.Fatalf("Reader did not reach the end of %d bytes", len(in))
	})
}
