package frame

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

// stream concatenates the encodings of fs.
func stream(fs ...Frame) []byte {
	var b []byte
	for _, f := range fs {
		b = Append(b, f)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("x"), DefaultMaxPayload)
	frames := []Frame{
		{Ping, nil},
		{Pong, []byte(`{}`)},
		{ExecuteRequest, []byte(`{"capability":"c","params":{},"admin":false}`)},
		{InvokeCapability, []byte{0x00, 0xff, 0x05}},
		{AppShutdown, nil},
		{PushEvent, big},
		{DetectRequest, []byte(`{"app_id":"org.example.mail"}`)},
	}
	var buf bytes.Buffer
	for _, f := range frames {
		if err := Write(&buf, f); err != nil {
			t.Fatalf("Write(%s) error = %v", f.Type, err)
		}
	}
	r := NewReader(&buf, 0)
	for i, want := range frames {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: Next() error = %v", i, err)
		}
		if got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("frame %d: got %s (%d bytes), want %s (%d bytes)", i, got.Type, len(got.Payload), want.Type, len(want.Payload))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("Next() at end = %v, want io.EOF", err)
	}
}

func TestRoundTripPipe(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	want := Frame{ExecuteRequest, []byte(`{"capability":"mail.compose","params":{},"admin":false}`)}
	errc := make(chan error, 1)
	go func() { errc <- Write(a, want) }()
	got, err := NewReader(b, 0).Next()
	if err != nil {
		t.Fatalf("Next() error = %v", err)
	}
	if got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) {
		t.Errorf("Next() = %s %q, want %s %q", got.Type, got.Payload, want.Type, want.Payload)
	}
	if err := <-errc; err != nil {
		t.Errorf("Write() error = %v", err)
	}
}

type countingWriter struct {
	calls int
	bytes.Buffer
}

func (w *countingWriter) Write(p []byte) (int, error) { w.calls++; return w.Buffer.Write(p) }

func TestWriteOneCall(t *testing.T) {
	for _, n := range []int{0, 1, 4096, 100 << 10} {
		var w countingWriter
		f := Frame{PushEvent, bytes.Repeat([]byte{'e'}, n)}
		if err := Write(&w, f); err != nil {
			t.Fatal(err)
		}
		if w.calls != 1 {
			t.Errorf("payload %d: Write made %d calls, want 1", n, w.calls)
		}
		if got, want := w.Len(), HeaderLen+n; got != want {
			t.Errorf("payload %d: wrote %d bytes, want %d", n, got, want)
		}
	}
}

func TestWriteRefusesNonType(t *testing.T) {
	for _, tag := range []uint8{0, 28, 255} {
		var w countingWriter
		err := Write(&w, Frame{Type(tag), []byte("x")})
		if err == nil || !strings.Contains(err.Error(), "not a message type") {
			t.Errorf("Write(Type(%d)) error = %v, want \"not a message type\"", tag, err)
		}
		if w.calls != 0 {
			t.Errorf("Write(Type(%d)) wrote %d times, want 0", tag, w.calls)
		}
	}
}

func TestWriteError(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	defer a.Close()
	if err := Write(a, Frame{Ping, nil}); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write to a closed pipe: error = %v, want io.ErrClosedPipe", err)
	}
}

func TestMaxPayloadBoundary(t *testing.T) {
	tests := []struct {
		max     int
		n       int
		tooLong bool
	}{
		{max: 16, n: 0},
		{max: 16, n: 16},
		{max: 16, n: 17, tooLong: true},
		{max: 0, n: DefaultMaxPayload},
		{max: 0, n: DefaultMaxPayload + 1, tooLong: true},
		{max: -1, n: DefaultMaxPayload + 1, tooLong: true},
	}
	for _, tt := range tests {
		f := Frame{RegistryResponse, bytes.Repeat([]byte{'r'}, tt.n)}
		r := NewReader(bytes.NewReader(stream(f, Frame{Ping, nil})), tt.max)
		got, err := r.Next()
		if tt.tooLong {
			var tl *TooLargeError
			if !errors.As(err, &tl) {
				t.Fatalf("max %d, payload %d: Next() error = %v, want *TooLargeError", tt.max, tt.n, err)
			}
			want := TooLargeError{Type: RegistryResponse, Length: uint32(tt.n), Max: r.MaxPayload()}
			if *tl != want {
				t.Errorf("max %d, payload %d: error = %+v, want %+v", tt.max, tt.n, *tl, want)
			}
			if got.Type != RegistryResponse || got.Payload != nil {
				t.Errorf("max %d, payload %d: frame = %s with %d bytes, want RegistryResponse with none", tt.max, tt.n, got.Type, len(got.Payload))
			}
		} else if err != nil || len(got.Payload) != tt.n {
			t.Errorf("max %d, payload %d: Next() = %d bytes, %v; want %d bytes, nil", tt.max, tt.n, len(got.Payload), err, tt.n)
		}
		// Either way the stream is in sync: the Ping that follows reads intact.
		if got, err := r.Next(); err != nil || got.Type != Ping || len(got.Payload) != 0 {
			t.Errorf("max %d, payload %d: following frame = %s %q, %v; want Ping", tt.max, tt.n, got.Type, got.Payload, err)
		}
		if _, err := r.Next(); err != io.EOF {
			t.Errorf("max %d, payload %d: Next() at end = %v, want io.EOF", tt.max, tt.n, err)
		}
	}
}

func TestOversizedSkipped(t *testing.T) {
	in := stream(
		Frame{ExecuteRequest, bytes.Repeat([]byte{'a'}, 100_000)},
		Frame{ExecuteRequest, []byte(`{"capability":"ok"}`)},
	)
	r := NewReader(bytes.NewReader(in), 1024)
	_, err := r.Next()
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("Next() error = %v, want *TooLargeError", err)
	}
	if got, want := err.Error(), "frame: ExecuteRequest payload of 100000 bytes exceeds the maximum of 1024"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	got, err := r.Next()
	if err != nil || got.Type != ExecuteRequest || string(got.Payload) != `{"capability":"ok"}` {
		t.Errorf("following frame = %s %q, %v; want ExecuteRequest {\"capability\":\"ok\"}", got.Type, got.Payload, err)
	}
}

func TestOversizedFailFast(t *testing.T) {
	// Only the header is sent: a fail-fast reader must not wait for the
	// payload.
	var hdr [HeaderLen]byte
	hdr[0] = byte(ManifestResponse)
	hdr[1], hdr[2], hdr[3], hdr[4] = 0x00, 0x10, 0x00, 0x01
	pr, pw := io.Pipe()
	go pw.Write(hdr[:])
	defer pw.Close()
	r := NewReader(pr, 1<<20)
	r.FailFast()
	for i := range 2 {
		f, err := r.Next()
		var tl *TooLargeError
		if !errors.As(err, &tl) || tl.Length != 1<<20+1 || tl.Type != ManifestResponse || (i == 0 && f.Type != ManifestResponse) {
			t.Fatalf("call %d: Next() = %s, %v; want ManifestResponse, *TooLargeError of 1048577 bytes", i+1, f.Type, err)
		}
	}
}

func TestUnknownTagSkipped(t *testing.T) {
	for _, tag := range []uint8{0, 28, 200, 255} {
		in := stream(Frame{Type(tag), []byte("junk")}, Frame{Ping, nil})
		r := NewReader(bytes.NewReader(in), 0)
		_, err := r.Next()
		var ut *UnknownTypeError
		if !errors.As(err, &ut) {
			t.Fatalf("tag %d: Next() error = %v, want *UnknownTypeError", tag, err)
		}
		if want := (UnknownTypeError{Tag: tag, Length: 4, Skipped: true}); *ut != want {
			t.Errorf("tag %d: error = %+v, want %+v", tag, *ut, want)
		}
		if got, err := r.Next(); err != nil || got.Type != Ping {
			t.Errorf("tag %d: following frame = %s, %v; want Ping", tag, got.Type, err)
		}
	}
}

// A JSON-RPC line on the framed socket: tag '{' (123) and a length of
// `"jso` (577 MB). Nothing is discarded and the Reader stays failed.
func TestUnknownTagOversizedIsSticky(t *testing.T) {
	r := NewReader(strings.NewReader(`{"jsonrpc":"2.0","method":"ping","id":1}`+"\n"), 0)
	for i := range 3 {
		_, err := r.Next()
		var ut *UnknownTypeError
		if !errors.As(err, &ut) {
			t.Fatalf("call %d: Next() error = %v, want *UnknownTypeError", i, err)
		}
		if want := (UnknownTypeError{Tag: '{', Length: 0x226a736f, Skipped: false}); *ut != want {
			t.Errorf("call %d: error = %+v, want %+v", i, *ut, want)
		}
	}
}

func TestTruncated(t *testing.T) {
	ping := stream(Frame{Ping, nil})
	exec := stream(Frame{ExecuteRequest, []byte(`{"capability":"c"}`)})
	tests := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"empty", nil, 0, io.EOF},
		{"tag only", ping[:1], 0, io.ErrUnexpectedEOF},
		{"half a length", ping[:3], 0, io.ErrUnexpectedEOF},
		{"header short by one", ping[:4], 0, io.ErrUnexpectedEOF},
		{"no payload", exec[:HeaderLen], 0, io.ErrUnexpectedEOF},
		{"payload short by one", exec[:len(exec)-1], 0, io.ErrUnexpectedEOF},
		{"skipped oversized payload short", exec[:len(exec)-1], 4, io.ErrUnexpectedEOF},
		{"skipped unknown payload short", []byte{0, 0, 0, 0, 3, 'a'}, 0, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		r := NewReader(bytes.NewReader(tt.in), tt.max)
		if _, err := r.Next(); err != tt.want {
			t.Errorf("%s: Next() error = %v, want %v", tt.name, err, tt.want)
		}
	}
	// A frame then a truncated one: the first reads, the second fails.
	r := NewReader(bytes.NewReader(append(ping, exec[:7]...)), 0)
	if f, err := r.Next(); err != nil || f.Type != Ping {
		t.Errorf("first frame = %s, %v; want Ping, nil", f.Type, err)
	}
	if _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Errorf("second frame error = %v, want io.ErrUnexpectedEOF", err)
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestReaderErrorPassedThrough(t *testing.T) {
	boom := errors.New("boom")
	if _, err := NewReader(failingReader{boom}, 0).Next(); err != boom {
		t.Errorf("Next() error = %v, want %v", err, boom)
	}
	mid := io.MultiReader(bytes.NewReader([]byte{byte(Ping), 0, 0, 0, 9, 'x'}), failingReader{boom})
	if _, err := NewReader(mid, 0).Next(); err != boom {
		t.Errorf("Next() error mid-payload = %v, want %v", err, boom)
	}
}

func TestPayloadReused(t *testing.T) {
	// The contract: a payload is valid until the next call. The buffer is
	// reused, so a frame of equal or smaller size does not allocate.
	in := stream(Frame{Pong, []byte("first")}, Frame{Pong, []byte("other")})
	r := NewReader(bytes.NewReader(in), 0)
	a, _ := r.Next()
	b, _ := r.Next()
	if &a.Payload[0] != &b.Payload[0] {
		t.Errorf("payload buffer not reused between frames of equal size")
	}
	if string(b.Payload) != "other" {
		t.Errorf("second payload = %q, want %q", b.Payload, "other")
	}
}

func TestAppendExtends(t *testing.T) {
	got := Append([]byte("prefix"), Frame{Ping, []byte{1}})
	if want := []byte("prefix\x08\x00\x00\x00\x01\x01"); !bytes.Equal(got, want) {
		t.Errorf("Append = %q, want %q", got, want)
	}
}

func TestStatusCodes(t *testing.T) {
	tests := []struct {
		got, want uint16
	}{
		{StatusUnsupported, 400}, {StatusForbidden, 403}, {StatusNotFound, 404},
		{StatusConflict, 409}, {StatusRateLimited, 429}, {StatusAdapterFailure, 500},
		{StatusTimeout, 504},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("status = %d, want %d", tt.got, tt.want)
		}
	}
	// Every PCP error maps to one of these codes.
	known := map[uint16]bool{}
	for _, tt := range tests {
		known[tt.want] = true
	}
	for _, e := range api.Catalogue() {
		if !known[e.StreamCode] {
			t.Errorf("%s: StreamCode %d is not a frame status", e.Name, e.StreamCode)
		}
	}
}
