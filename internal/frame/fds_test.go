package frame

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// fakeFDs hands out descriptor numbers and records which were closed.
type fakeFDs struct {
	next   int
	closed map[int]int
}

func (f *fakeFDs) take(n int) []int {
	fds := make([]int, n)
	for i := range fds {
		f.next++
		fds[i] = f.next
	}
	return fds
}

func (f *fakeFDs) close(fd int) { f.closed[fd]++ }

func TestFrameFDsAssignsDescriptorsToTheFrameOfTheReadsLastByte(t *testing.T) {
	type chunk struct{ n, fds int }
	type span struct{ start, end int64 }
	for _, c := range []struct {
		name   string
		chunks []chunk
		takes  []span
		want   [][]int
		closed []int
	}{
		{"the tag alone", []chunk{{1, 2}, {20, 0}}, []span{{0, 21}}, [][]int{{1, 2}}, nil},
		{"after earlier frames", []chunk{{10, 0}, {1, 1}, {4, 0}}, []span{{0, 5}, {5, 10}, {10, 15}}, [][]int{nil, nil, {1}}, nil},
		{"a read ending inside a frame", []chunk{{3, 1}, {10, 0}}, []span{{0, 5}, {5, 13}}, [][]int{{1}, nil}, nil},
		{"a frame passed over is closed", []chunk{{5, 1}, {5, 1}}, []span{{5, 10}}, [][]int{{2}}, []int{1}},
		{"two reads for one frame", []chunk{{1, 1}, {1, 2}, {3, 0}}, []span{{0, 5}}, [][]int{{1, 2, 3}}, nil},
		{"descriptors with no bytes belong to the next byte", []chunk{{5, 0}, {0, 1}, {5, 0}}, []span{{0, 5}, {5, 10}}, [][]int{nil, {1}}, nil},
		{"a later frame's stay held", []chunk{{5, 0}, {1, 1}}, []span{{0, 5}}, [][]int{nil}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fakeFDs{closed: map[int]int{}}
			l := &FrameFDs{Close: f.close, Max: maxHeldFDs}
			for _, ch := range c.chunks {
				l.Chunk(ch.n, f.take(ch.fds))
			}
			for i, s := range c.takes {
				if got := l.Take(s.start, s.end); !equalInts(got, c.want[i]) {
					t.Errorf("Take(%d, %d) = %v, want %v", s.start, s.end, got, c.want[i])
				}
			}
			var closed []int
			for fd := 1; fd <= f.next; fd++ {
				if f.closed[fd] > 0 {
					closed = append(closed, fd)
				}
			}
			if !equalInts(closed, c.closed) {
				t.Errorf("closed %v, want %v", closed, c.closed)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFrameFDsBoundsWhatItHolds(t *testing.T) {
	f := fakeFDs{closed: map[int]int{}}
	l := &FrameFDs{Close: f.close, Max: maxHeldFDs}
	l.Chunk(1, f.take(MaxFDsPerFrame+5))
	if len(f.closed) != 5 || l.Held() != MaxFDsPerFrame {
		t.Fatalf("one read of %d: %d closed, %d held; want 5 closed, %d held", MaxFDsPerFrame+5, len(f.closed), l.Held(), MaxFDsPerFrame)
	}
	for range 4 {
		l.Chunk(1, f.take(MaxFDsPerFrame))
	}
	if l.Held() != maxHeldFDs {
		t.Fatalf("held %d, want the bound %d", l.Held(), maxHeldFDs)
	}
	// Two reads' worth for one frame: it keeps MaxFDsPerFrame.
	if got := l.Take(0, 3); len(got) != MaxFDsPerFrame {
		t.Fatalf("a frame over two full reads got %d descriptors, want %d", len(got), MaxFDsPerFrame)
	}
	l.CloseAll()
	if l.Held() != 0 {
		t.Fatalf("after CloseAll %d held", l.Held())
	}
}

// chunkConn is a MsgReader that returns stream in the chunks plan says,
// each with the fake descriptors plan says, as recvmsg would.
type chunkConn struct {
	stream []byte
	plan   []byte
	fds    *fakeFDs
	// owner is the stream offset of the last byte each descriptor came
	// with (or of the next byte, for a read of none).
	owner map[int]int64
	off   int64
	i     int
}

func (c *chunkConn) ReadMsgUnix(b, oob []byte) (n, oobn, flags int, addr *net.UnixAddr, err error) {
	if len(c.stream) == 0 {
		return 0, 0, 0, nil, io.EOF
	}
	p := byte(0x31)
	if c.i < len(c.plan) {
		p = c.plan[c.i]
	}
	c.i++
	n = min(int(p&0x0f), len(c.stream), len(b))
	copy(b, c.stream[:n])
	c.stream = c.stream[n:]
	got := c.fds.take(int(p>>4) * 3) // up to 45, past the per-frame bound
	at := c.off
	if n > 0 {
		at += int64(n) - 1
	}
	for _, fd := range got {
		c.owner[fd] = at
	}
	c.off += int64(n)
	if len(got) > 0 {
		rights := syscall.UnixRights(got...)
		if len(rights) > len(oob) {
			// As the kernel does: what does not fit is closed (MSG_CTRUNC).
			for _, fd := range got {
				c.fds.close(fd)
			}
			return n, 0, syscall.MSG_CTRUNC, nil, nil
		}
		oobn = copy(oob, rights)
	}
	return n, oobn, 0, nil, nil
}

// FuzzFDReader reads a byte stream arriving in arbitrary chunks, each
// with some descriptors, through an FDReader, and checks that every
// descriptor is handed out with the frame that holds the last byte of the
// read it came with, or closed, exactly once, within the bounds; and that
// the frames are those a plain Reader reads from the same bytes.
func FuzzFDReader(f *testing.F) {
	f.Add(stream(Frame{ExecuteResponse, []byte(`{"result":{}}`)}, Frame{Pong, []byte("{}")}), []byte{0x11, 0x0f, 0x0f, 0x21, 0x0f})
	f.Add(stream(Frame{Ping, nil}, Frame{PushEvent, bytes.Repeat([]byte{'p'}, fuzzMax+1)}, Frame{Ping, nil}), []byte{0xf5, 0xf3, 0xff})
	f.Add([]byte{0, 0, 0, 0, 2, 'x', 'y', byte(Ping), 0, 0, 0, 0}, []byte{0x31, 0x01, 0x71})
	f.Add([]byte(`{"jsonrpc":"2.0"}`), []byte{0x1f})
	f.Add(stream(Frame{ExecuteResponse, []byte("{}")}), []byte{0x10, 0x01, 0x0f})
	f.Fuzz(func(t *testing.T, in, plan []byte) {
		fds := &fakeFDs{closed: map[int]int{}}
		conn := &chunkConn{stream: bytes.Clone(in), plan: plan, fds: fds, owner: map[int]int64{}}
		r := NewFDReader(conn, fuzzMax)
		r.src.fds.Close = fds.close
		plain := NewReader(bytes.NewReader(in), fuzzMax)
		handed := map[int]int{}
		for range len(in) + 2 {
			start := r.cnt.n
			fr, got, err := r.Next()
			end := r.cnt.n
			want, werr := plain.Next()
			if (err == nil) != (werr == nil) || fr.Type != want.Type || !bytes.Equal(fr.Payload, want.Payload) {
				t.Fatalf("FDReader read %v %q %v, Reader %v %q %v", fr.Type, fr.Payload, err, want.Type, want.Payload, werr)
			}
			if err != nil && len(got) > 0 {
				t.Fatalf("an error (%v) came with %d descriptors", err, len(got))
			}
			if len(got) > MaxFDsPerFrame {
				t.Fatalf("a frame got %d descriptors, over %d", len(got), MaxFDsPerFrame)
			}
			for _, fd := range got {
				if at := conn.owner[fd]; at < start || at >= end {
					t.Fatalf("descriptor %d of offset %d handed out with the frame at %d..%d", fd, at, start, end)
				}
				handed[fd]++
			}
			if r.src.fds.Held() > maxHeldFDs {
				t.Fatalf("holds %d descriptors, over %d", r.src.fds.Held(), maxHeldFDs)
			}
			var tl *TooLargeError
			var ut *UnknownTypeError
			if err != nil && !errors.As(err, &tl) && !(errors.As(err, &ut) && ut.Skipped) {
				break
			}
		}
		r.Close()
		for fd := 1; fd <= fds.next; fd++ {
			if n := handed[fd] + fds.closed[fd]; n != 1 {
				t.Fatalf("descriptor %d of offset %d: handed out %d times, closed %d times", fd, conn.owner[fd], handed[fd], fds.closed[fd])
			}
		}
	})
}

func memfd(t *testing.T, data string) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return fd
}

func readFD(t *testing.T, fd int) string {
	t.Helper()
	b := make([]byte, 64)
	n, err := unix.Pread(fd, b, 0)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// TestWriteFDsOverASocket passes descriptors with frames among frames
// that carry none, through a real socket pair, and reads each back with
// its own frame; the descriptors of a frame passed over and of frames
// not yet read are closed, and none is left open.
func TestWriteFDsOverASocket(t *testing.T) {
	before := testkit.OpenFDs(t)
	a, b := testkit.SocketPair(t)
	frames := []struct {
		f    Frame
		fds  []string
		skip bool
	}{
		{Frame{Pong, []byte("{}")}, nil, false},
		{Frame{ExecuteResponse, []byte(`{"one":1}`)}, []string{"one"}, false},
		{Frame{ExecuteResponse, bytes.Repeat([]byte("x"), fuzzMax+1)}, []string{"skipped"}, true},
		{Frame{ExecuteResponse, []byte(`{"two":2}`)}, []string{"two-a", "two-b"}, false},
		{Frame{PushEvent, []byte(`{}`)}, nil, false},
		{Frame{ExecuteResponse, []byte(`{"unread":1}`)}, []string{"unread"}, false},
	}
	for _, fr := range frames {
		var fds []int
		for _, d := range fr.fds {
			fds = append(fds, memfd(t, d))
		}
		if err := WriteFDs(a, fr.f, fds); err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	r := NewFDReader(b, fuzzMax)
	for _, want := range frames[:len(frames)-1] {
		fr, fds, err := r.Next()
		if want.skip {
			var tl *TooLargeError
			if !errors.As(err, &tl) || len(fds) != 0 {
				t.Fatalf("oversized frame: %v with %d descriptors, want a TooLargeError and none", err, len(fds))
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if fr.Type != want.f.Type || !bytes.Equal(fr.Payload, want.f.Payload) {
			t.Fatalf("read %v %q, want %v %q", fr.Type, fr.Payload, want.f.Type, want.f.Payload)
		}
		var got []string
		for _, fd := range fds {
			got = append(got, readFD(t, fd))
			unix.Close(fd)
		}
		if len(got) != len(want.fds) || (len(got) > 0 && !equalStrings(got, want.fds)) {
			t.Fatalf("%s came with %q, want %q", fr.Type, got, want.fds)
		}
	}
	r.Close()
	a.Close()
	b.Close()
	if after := testkit.OpenFDs(t); after != before {
		t.Fatalf("%d descriptors open after, %d before", after, before)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWriteFDsRefusesTooMany(t *testing.T) {
	a, b := testkit.SocketPair(t)
	defer a.Close()
	defer b.Close()
	fds := make([]int, MaxFDsPerFrame+1)
	for i := range fds {
		fds[i] = int(os.Stdin.Fd())
	}
	var ce *FDCountError
	if err := WriteFDs(a, Frame{ExecuteResponse, nil}, fds); !errors.As(err, &ce) || ce.Count != MaxFDsPerFrame+1 {
		t.Fatalf("WriteFDs with %d descriptors: %v, want an FDCountError", len(fds), err)
	}
}
