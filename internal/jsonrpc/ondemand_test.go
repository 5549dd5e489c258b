package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// forReadModes runs test with a connection that reads in the background
// and with one that reads on demand.
func forReadModes(t *testing.T, test func(t *testing.T, opts Options)) {
	t.Run("background", func(t *testing.T) { test(t, Options{}) })
	t.Run("on demand", func(t *testing.T) { test(t, Options{ReadOnDemand: true}) })
}

// A connection reading on demand serves, while its calls wait, whatever
// the peer sends meanwhile: a notification, and a request of its own,
// which it answers; the call gets its answer after both. Nothing reads
// between calls.
func TestOnDemandCallServesWhatComesMeanwhile(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	var (
		mu    sync.Mutex
		notes []string
	)
	h := HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		if m.IsNotification() {
			mu.Lock()
			notes = append(notes, string(m.Params))
			mu.Unlock()
			return nil, nil
		}
		return "client answers " + m.Method, nil
	})
	cli := NewConn(a, Options{Handler: h, ReadOnDemand: true})
	var srv *Conn
	srv = NewConn(b, Options{Handler: HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		if err := srv.Notify("note", map[string]int{"n": 1}); err != nil {
			return nil, err
		}
		var s string
		if err := srv.Call(ctx, "ask", nil, &s); err != nil {
			return nil, err
		}
		return "server heard: " + s, nil
	})})
	go cli.Run()
	go srv.Run()
	defer cli.Close()
	defer srv.Close()
	for i := range 3 {
		var got string
		if err := cli.Call(context.Background(), "hello", nil, &got); err != nil || got != "server heard: client answers ask" {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) != 3 || notes[0] != `{"n":1}` {
		t.Errorf("notifications handled: %q, want 3 of {\"n\":1}", notes)
	}
	if !cli.onDemand.Load() {
		t.Error("the connection reads in the background, though StartReading was never called")
	}
}

// Many calls at once on a connection reading on demand: one reads for
// all, each gets its own answer.
func TestOnDemandConcurrentCalls(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	cli := NewConn(a, Options{ReadOnDemand: true})
	srv := NewConn(b, Options{Handler: echoHandler(nil)})
	go cli.Run()
	go srv.Run()
	defer cli.Close()
	defer srv.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				n := g*1000 + i
				var got map[string]int
				if err := cli.Call(context.Background(), "echo", map[string]int{"n": n}, &got); err != nil || got["n"] != n {
					t.Errorf("call %d: %v, %v", n, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A call's context interrupts the read it is doing for itself; half an
// answer already read is kept, so the next call finds the stream in
// sync and gets its own answer.
func TestOnDemandContextInterruptsTheRead(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	var protocolErrors []*api.Error
	rc := &readsConn{UnixConn: a, reads: make(chan int, 16)}
	cli := NewConn(rc, Options{ReadOnDemand: true, OnProtocolError: func(e *api.Error) { protocolErrors = append(protocolErrors, e) }})
	go cli.Run()
	defer cli.Close()
	rd := bufio.NewReader(b)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- cli.Call(ctx, "slow", nil, nil) }()
	if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("first request: %q, %v", line, err)
	}
	// Half the answer, then the caller gives up.
	io.WriteString(b, `{"jsonrpc":"2.0","id":1,"res`)
	if n := <-rc.reads; n != len(`{"jsonrpc":"2.0","id":1,"res`) {
		t.Fatalf("the client read %d bytes, want the half answer", n)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call: %v, want context.Canceled", err)
	}
	go func() {
		if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"id":2`) {
			t.Errorf("second request: %q, %v", line, err)
		}
		io.WriteString(b, `ult":"late"}`+"\n"+`{"jsonrpc":"2.0","id":2,"result":"second"}`+"\n")
	}()
	var got string
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := cli.Call(ctx2, "again", nil, &got); err != nil || got != "second" {
		t.Fatalf("the next call: %q, %v; want \"second\"", got, err)
	}
	if len(protocolErrors) > 0 {
		t.Errorf("protocol errors %v: the stream lost sync", protocolErrors[0])
	}
}

// readsConn tells of every read that returned bytes.
type readsConn struct {
	*net.UnixConn
	reads chan int
}

func (c *readsConn) Read(p []byte) (int, error) {
	n, err := c.UnixConn.Read(p)
	if n > 0 {
		c.reads <- n
	}
	return n, err
}

// StartReading moves the reading to Run: notifications are handled with
// no call waiting, and Done is closed when the peer hangs up.
func TestOnDemandStartReading(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	noted := make(chan string, 1)
	cli := NewConn(a, Options{ReadOnDemand: true, Handler: HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		noted <- m.Method
		return nil, nil
	})})
	done := make(chan error, 1)
	go func() { done <- cli.Run() }()
	// A call first, read on demand.
	go func() {
		rd := bufio.NewReader(b)
		rd.ReadString('\n')
		io.WriteString(b, `{"jsonrpc":"2.0","id":1,"result":"ok"}`+"\n")
	}()
	if err := cli.Call(context.Background(), "x", nil, nil); err != nil {
		t.Fatal(err)
	}
	cli.StartReading()
	cli.StartReading() // twice is fine
	io.WriteString(b, `{"jsonrpc":"2.0","method":"pushed"}`+"\n")
	select {
	case m := <-noted:
		if m != "pushed" {
			t.Errorf("handled %q, want pushed", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a notification was not read after StartReading")
	}
	b.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end when the peer hung up")
	}
	<-cli.Done()
}

// Closing a connection that reads on demand, with no call waiting, ends
// Run.
func TestOnDemandCloseEndsRun(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, _ := pair(t)
	cli := NewConn(a, Options{ReadOnDemand: true})
	done := make(chan error, 1)
	go func() { done <- cli.Run() }()
	cli.Close()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// Options that need a read loop of their own turn ReadOnDemand off.
func TestOnDemandIgnoredWithTimeouts(t *testing.T) {
	a, _ := pair(t)
	for _, opts := range []Options{
		{ReadOnDemand: true, IdleTimeout: time.Minute},
		{ReadOnDemand: true, MessageTimeout: time.Minute},
		{ReadOnDemand: true, Gate: &Gate{Method: "auth"}},
	} {
		if c := NewConn(a, opts); c.onDemand.Load() {
			t.Errorf("%+v: reads on demand", opts)
		}
	}
}

// script is a reader that returns its chunks one read at a time, each
// chunk's error after its bytes: os.ErrDeadlineExceeded stands for an
// interrupted read.
type script struct{ steps []step }

type step struct {
	data string
	err  error
}

func (s *script) Read(p []byte) (int, error) {
	if len(s.steps) == 0 {
		return 0, io.EOF
	}
	st := &s.steps[0]
	n := copy(p, st.data)
	st.data = st.data[n:]
	if st.data != "" {
		return n, nil
	}
	s.steps = s.steps[1:]
	if n > 0 && st.err != nil {
		// bytes first, the error on its own read (as a socket does)
		s.steps = append([]step{{err: st.err}}, s.steps...)
		return n, nil
	}
	return n, st.err
}

// A LineReader with KeepPartial gives the same lines whatever reads are
// interrupted, wherever: within a short line, within a line longer than
// its buffer, within an oversized line it is skipping.
func TestLineReaderKeepsPartialLines(t *testing.T) {
	const max = 64 // the buffer is 65 bytes
	long := strings.Repeat("L", 50) + strings.Repeat("M", 10)
	over := strings.Repeat("X", 150)
	input := "short\n" + long + "\n" + over + "\nlast\n"
	want := []string{"short", long, "skip 150", "last"}
	for cut := 1; cut < len(input); cut++ {
		for _, cut2 := range []int{cut, min(cut+70, len(input)-1)} {
			steps := []step{{data: input[:cut], err: os.ErrDeadlineExceeded}}
			if cut2 > cut {
				steps = append(steps, step{data: input[cut:cut2], err: os.ErrDeadlineExceeded}, step{data: input[cut2:]})
			} else {
				steps = append(steps, step{data: input[cut:]})
			}
			l := NewLineReader(&script{steps: steps}, max)
			l.KeepPartial = true
			var got []string
			for {
				line, err := l.ReadLine()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					continue
				}
				if err == ErrLineTooLong {
					got = append(got, fmt.Sprintf("skip %d", l.Skipped))
					continue
				}
				if err != nil {
					break
				}
				got = append(got, string(bytes.Clone(line)))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("interrupted at %d and %d: got %q, want %q", cut, cut2, got, want)
			}
		}
	}
}

// readAll reads every line of l until its end: each line, or "skip N"
// for one over the bound; interrupted reads are retried.
func readAll(l *LineReader) []string {
	var got []string
	for {
		line, err := l.ReadLine()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			continue
		case err == ErrLineTooLong:
			got = append(got, fmt.Sprintf("skip %d", l.Skipped))
			continue
		case err != nil:
			return got
		}
		got = append(got, string(line))
	}
}

// FuzzLineReaderKeepPartial checks that reads interrupted anywhere (each
// byte of cuts is the length of the next chunk before an interruption)
// give a KeepPartial reader the lines an uninterrupted reader gives.
func FuzzLineReaderKeepPartial(f *testing.F) {
	f.Add([]byte("short\n"+strings.Repeat("L", 70)+"\n"+strings.Repeat("X", 150)+"\nlast"), []byte{3, 40, 1, 90}, uint8(64))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":"ok"}`+"\n\n"), []byte{10}, uint8(16))
	f.Fuzz(func(t *testing.T, data, cuts []byte, max uint8) {
		if max == 0 {
			max = 1
		}
		want := readAll(NewLineReader(bytes.NewReader(data), int(max)))
		var steps []step
		rest := string(data)
		for _, c := range cuts {
			n := min(int(c), len(rest))
			steps = append(steps, step{data: rest[:n], err: os.ErrDeadlineExceeded})
			rest = rest[n:]
		}
		steps = append(steps, step{data: rest})
		l := NewLineReader(&script{steps: steps}, int(max))
		l.KeepPartial = true
		if got := readAll(l); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("interrupted after chunks %v: got %q, want %q", cuts, got, want)
		}
	})
}
