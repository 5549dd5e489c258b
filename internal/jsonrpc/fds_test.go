package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
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

func (f *fakeFDs) lineFDs() *lineFDs {
	f.closed = map[int]int{}
	return &lineFDs{close: func(fd int) { f.closed[fd]++ }, max: maxHeldFDs}
}

func TestLineFDsAssignsDescriptorsToTheLineOfTheChunksLastByte(t *testing.T) {
	type chunk struct {
		data string
		fds  int
	}
	for _, c := range []struct {
		name   string
		chunks []chunk
		take   []int64 // lines taken, in order
		want   [][]int // what each Take returns
		closed []int
	}{
		{"first byte alone", []chunk{{"{", 2}, {"\"a\":1}\n", 0}}, []int64{0}, [][]int{{1, 2}}, nil},
		{"after earlier lines", []chunk{{"x\ny\n{", 1}, {"}\n", 0}}, []int64{0, 1, 2}, [][]int{nil, nil, {1}}, nil},
		{"the whole line with its newline", []chunk{{"a\n", 1}, {"b\n", 1}}, []int64{0, 1}, [][]int{{1}, {2}}, nil},
		{"mid-line belongs to that line", []chunk{{"ab", 0}, {"cd", 1}, {"e\n", 0}}, []int64{0}, [][]int{{1}}, nil},
		{"a line passed over is closed", []chunk{{"a\n", 1}, {"b\n", 1}}, []int64{1}, [][]int{{2}}, []int{1}},
		{"two chunks for one line", []chunk{{"a", 1}, {"b", 2}, {"\n", 0}}, []int64{0}, [][]int{{1, 2, 3}}, nil},
		{"an empty read", []chunk{{"", 1}, {"a\n", 0}}, []int64{0}, [][]int{{1}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f fakeFDs
			l := f.lineFDs()
			for _, ch := range c.chunks {
				l.Chunk([]byte(ch.data), f.take(ch.fds))
			}
			for i, line := range c.take {
				if got := l.Take(line); !cmp.Equal(got, c.want[i], cmpEmpty) {
					t.Errorf("Take(%d) = %v, want %v", line, got, c.want[i])
				}
			}
			var closed []int
			for fd := range f.closed {
				closed = append(closed, fd)
			}
			if !cmp.Equal(closed, c.closed, cmpEmpty) {
				t.Errorf("closed %v, want %v", closed, c.closed)
			}
		})
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []int) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })

func TestLineFDsBoundsWhatItHolds(t *testing.T) {
	var f fakeFDs
	l := f.lineFDs()
	l.Chunk([]byte("a"), f.take(MaxFDsPerLine+5))
	if len(f.closed) != 5 || l.count != MaxFDsPerLine {
		t.Fatalf("one line of %d: %d closed, %d held; want 5 closed, %d held", MaxFDsPerLine+5, len(f.closed), l.count, MaxFDsPerLine)
	}
	for range 4 {
		l.Chunk([]byte("\nb"), f.take(MaxFDsPerLine))
	}
	if l.count != maxHeldFDs {
		t.Fatalf("held %d, want the bound %d", l.count, maxHeldFDs)
	}
	l.CloseAll()
	if len(f.closed) != f.next {
		t.Errorf("after CloseAll %d of %d closed", len(f.closed), f.next)
	}
}

// FuzzLineFDs feeds a byte stream in chunks, each with some descriptors,
// takes some lines, and checks that every descriptor is handed out with
// its own line or closed, exactly once, within the bounds.
func FuzzLineFDs(f *testing.F) {
	f.Add([]byte("{\"id\":1}\n{\"id\":2}\n"), []byte{0x11, 0x05, 0x31, 0x02}, []byte{0, 1})
	f.Add([]byte("\n\n\n{}\n"), []byte{0x01, 0x71, 0xf3}, []byte{3})
	f.Add([]byte("abc"), []byte{0xff, 0xff, 0xff}, []byte{})
	f.Fuzz(func(t *testing.T, stream, plan, takes []byte) {
		var fds fakeFDs
		l := fds.lineFDs()
		owner := map[int]int64{} // descriptor: the line it came with
		lines := int64(0)
		for i := 0; len(stream) > 0 || i < len(plan); i++ {
			p := byte(0x01)
			if i < len(plan) {
				p = plan[i]
			}
			n := min(int(p&0x0f), len(stream))
			chunk := stream[:n]
			stream = stream[n:]
			got := fds.take(int(p >> 4 * 3)) // up to 45, past the per-line bound
			line := lines
			if n > 0 {
				line += int64(bytes.Count(chunk[:n-1], []byte{'\n'}))
			}
			for _, fd := range got {
				owner[fd] = line
			}
			l.Chunk(chunk, got)
			lines += int64(bytes.Count(chunk, []byte{'\n'}))
			if l.count > maxHeldFDs {
				t.Fatalf("holds %d descriptors, over %d", l.count, maxHeldFDs)
			}
			if len(stream) == 0 && i >= len(plan) {
				break
			}
		}
		handed := map[int]int{}
		last := int64(-1)
		for _, b := range takes {
			line := last + 1 + int64(b%4)
			last = line
			got := l.Take(line)
			if len(got) > MaxFDsPerLine {
				t.Fatalf("line %d got %d descriptors, over %d", line, len(got), MaxFDsPerLine)
			}
			for _, fd := range got {
				if owner[fd] != line {
					t.Fatalf("descriptor %d of line %d handed out with line %d", fd, owner[fd], line)
				}
				handed[fd]++
			}
		}
		l.CloseAll()
		for fd := 1; fd <= fds.next; fd++ {
			if n := handed[fd] + fds.closed[fd]; n != 1 {
				t.Fatalf("descriptor %d of line %d: handed out %d times, closed %d times", fd, owner[fd], handed[fd], fds.closed[fd])
			}
		}
	})
}

// pipeProbe is a pipe whose read end is what gets passed around: once
// every copy of it is closed, writing to the write end fails with EPIPE.
type pipeProbe struct{ r, w *os.File }

func newPipeProbe(t *testing.T) *pipeProbe {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return &pipeProbe{r: r, w: w}
}

// dup returns a new descriptor for the read end.
func (p *pipeProbe) dup(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Dup(int(p.r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	return fd
}

// allClosed closes this side's read end and reports whether no copy of
// it is left open anywhere.
func (p *pipeProbe) allClosed() bool {
	p.r.Close()
	_, err := p.w.Write([]byte{1})
	return errors.Is(err, syscall.EPIPE)
}

// fdResult is a result that passes descriptors.
type fdResult struct {
	N   int `json:"n"`
	fds []int
}

func (r *fdResult) FDs() []int { return r.fds }

func TestConnPassesEachLinesDescriptorsWithIt(t *testing.T) {
	sc, cc := pair(t)
	// Each "file" call's reply carries a pipe whose one byte is n, so a
	// descriptor that went with another line's reply reads wrong.
	server := NewConn(sc, Options{Handler: HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		var p struct{ N int }
		json.Unmarshal(m.Params, &p)
		n := p.N
		if m.Method == "plain" {
			return n, nil
		}
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		w.Write([]byte{byte(n)})
		w.Close()
		fd, err := syscall.Dup(int(r.Fd()))
		r.Close()
		if err != nil {
			return nil, err
		}
		return &fdResult{N: n, fds: []int{fd}}, nil
	})})
	client := NewConn(cc, Options{ReceiveFDs: true})
	go server.Run()
	go client.Run()
	defer server.Close()
	defer client.Close()
	if !server.CanPassFDs() {
		t.Fatal("a Unix socket cannot pass descriptors?")
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			method := "file"
			if i%3 == 0 {
				method = "plain"
			}
			var res json.RawMessage
			fds, err := client.CallFDs(ctx, method, map[string]int{"n": i % 256}, &res)
			if err != nil {
				errs <- err
				return
			}
			defer closeFDs(fds)
			if method == "plain" {
				if len(fds) != 0 {
					errs <- fmt.Errorf("call %d (plain) got %d descriptors", i, len(fds))
				}
				return
			}
			if len(fds) != 1 {
				errs <- fmt.Errorf("call %d got %d descriptors, want 1", i, len(fds))
				return
			}
			b := make([]byte, 2)
			n, _ := syscall.Read(fds[0], b)
			if n != 1 || int(b[0]) != i%256 {
				errs <- fmt.Errorf("call %d: its descriptor holds %v, want [%d]", i, b[:max(n, 0)], i%256)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConnClosesDescriptorsNoCallClaims(t *testing.T) {
	sc, cc := pair(t)
	probe := newPipeProbe(t)
	client := NewConn(cc, Options{ReceiveFDs: true, Handler: echoHandler(nil)})
	go client.Run()
	defer client.Close()
	// A peer that sends descriptors unasked, with every kind of line.
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}`,
		`{"jsonrpc":"2.0","method":"note","params":{}}`,
		`{"jsonrpc":"2.0","id":99,"result":{}}`,
		``,
		`[{"jsonrpc":"2.0","id":2,"method":"echo"}]`,
		`not json`,
		strings.Repeat("x", 100),
	}
	for _, line := range lines {
		b := []byte(line + "\n")
		fds := []int{probe.dup(t), probe.dup(t)}
		_, _, err := sc.WriteMsgUnix(b[:1], syscall.UnixRights(fds...), nil)
		closeFDs(fds) // the kernel holds its own references
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Write(b[1:]); err != nil {
			t.Fatal(err)
		}
	}
	// Then a request without any: its answer comes after every line
	// before it was read.
	if _, err := sc.Write([]byte(`{"jsonrpc":"2.0","id":"last","method":"echo","params":"x"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(sc)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"last"`) {
			break
		}
	}
	if !probe.allClosed() {
		t.Error("descriptors sent unasked are still open in the receiving process")
	}
}

func TestBatchReplyCarriesNoDescriptors(t *testing.T) {
	sc, cc := pair(t)
	probe := newPipeProbe(t)
	inBatch := map[string]bool{}
	var mu sync.Mutex
	server := NewConn(sc, Options{Handler: HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		mu.Lock()
		inBatch[string(m.ID)] = InBatch(ctx)
		mu.Unlock()
		return &fdResult{fds: []int{probe.dup(t)}}, nil
	})})
	go server.Run()
	defer server.Close()
	cc.Write([]byte(`[{"jsonrpc":"2.0","id":1,"method":"f"}]` + "\n" + `{"jsonrpc":"2.0","method":"f"}` + "\n" + `{"jsonrpc":"2.0","id":"last","method":"f"}` + "\n"))
	// The reply to "last" carries a descriptor, which the kernel drops:
	// read() takes none.
	r := bufio.NewReader(cc)
	for range 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "[") && !strings.Contains(line, `"code":-32603`) {
			t.Errorf("batch reply %s, want INTERNAL_ERROR: a batch cannot carry descriptors", line)
		}
	}
	mu.Lock()
	if want := map[string]bool{"1": true, "": false, `"last"`: false}; !cmp.Equal(inBatch, want) {
		t.Errorf("InBatch by request id = %v, want %v", inBatch, want)
	}
	mu.Unlock()
	if !probe.allClosed() {
		t.Error("descriptors of a batch's result or a notification's left open")
	}
}
