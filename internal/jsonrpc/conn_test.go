package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) { return testkit.SocketPair(t) }

// echoHandler serves echo, fail, panic and slow; slow returns "done" once
// release is closed (a nil release: at once).
func echoHandler(release <-chan struct{}) Handler {
	return HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		switch m.Method {
		case "echo":
			return m.Params, nil
		case "fail":
			return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": "x"}, "no app")
		case "panic":
			panic("boom")
		case "slow":
			if release != nil {
				<-release
			}
			return "done", nil
		}
		return nil, api.ErrMethodNotFound
	})
}

func TestConnBothDirections(t *testing.T) {
	a, b := pair(t)
	ca := NewConn(a, Options{Handler: echoHandler(nil)})
	cb := NewConn(b, Options{Handler: echoHandler(nil)})
	go ca.Run()
	go cb.Run()
	defer ca.Close()
	defer cb.Close()
	ctx := context.Background()

	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(2)
		for _, c := range []*Conn{ca, cb} {
			go func() {
				defer wg.Done()
				var got map[string]int
				if err := c.Call(ctx, "echo", map[string]int{"n": i}, &got); err != nil {
					t.Errorf("Call: %v", err)
					return
				}
				if got["n"] != i {
					t.Errorf("echo n = %d, want %d", got["n"], i)
				}
			}()
		}
	}
	wg.Wait()

	err := ca.Call(ctx, "fail", nil, nil)
	if !errors.Is(err, api.ErrAppNotFound) {
		t.Fatalf("got %v, want APP_NOT_FOUND", err)
	}
	if d := err.(*api.Error).DataMap(); d["app_id"] != "x" {
		t.Errorf("error data = %v, want app_id x", d)
	}
	if err := ca.Call(ctx, "panic", nil, nil); !errors.Is(err, api.ErrInternal) {
		t.Errorf("panicking handler: got %v, want INTERNAL_ERROR", err)
	}
	// The connection survives the panic.
	var s string
	if err := ca.Call(ctx, "slow", nil, &s); err != nil || s != "done" {
		t.Errorf("after panic: %q, %v", s, err)
	}
}

// A call whose peer never answers ends at its context's deadline, to the
// moment (on the bubble's fake clock), and its connection goes on.
func TestCallDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		ca := NewConn(a, Options{})
		defer ca.Close()
		go ca.Run()
		go io.Copy(io.Discard, b) // the peer reads and never answers
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		start := time.Now()
		if err := ca.Call(ctx, "x", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != 30*time.Second {
			t.Errorf("the call returned after %v, want its 30s deadline", d)
		}
		select {
		case <-ca.Done():
			t.Error("the connection closed after a call timed out")
		default:
		}
	})
}

// A call waiting for its reply fails with ErrClosed when the peer closes.
func TestCallPeerCloses(t *testing.T) { forReadModes(t, testCallPeerCloses) }

func testCallPeerCloses(t *testing.T, opts Options) {
	a, b := pair(t)
	ca := NewConn(a, opts)
	go ca.Run()
	rd := bufio.NewReader(b)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	done := make(chan error, 1)
	go func() { done <- ca.Call(context.Background(), "x", nil, nil) }()
	// The request on the wire shows the call is waiting for its reply.
	if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"method":"x"`) {
		t.Fatalf("the peer read %q, %v; want the call's request", line, err)
	}
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Call did not return after the peer closed")
	}
}

// A peer that sends its requests and shuts its write side still gets
// every answer.
func TestAnswersAfterPeerEOF(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	// The handlers answer only once the connection has read the EOF.
	eof := &eofSignal{UnixConn: a, seen: make(chan struct{})}
	c := NewConn(eof, Options{Handler: echoHandler(eof.seen)})
	go c.Run()
	for i := range 5 {
		fmt.Fprintf(b, `{"jsonrpc":"2.0","id":%d,"method":"slow"}`+"\n", i)
	}
	b.CloseWrite()
	rd := bufio.NewReader(b)
	seen := map[int]bool{}
	for range 5 {
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := rd.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d replies: %v", len(seen), err)
		}
		var r struct {
			ID     int    `json:"id"`
			Result string `json:"result"`
		}
		if err := json.Unmarshal(line, &r); err != nil || r.Result != "done" {
			t.Fatalf("reply %s: %v", line, err)
		}
		seen[r.ID] = true
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection did not close after answering")
	}
}

func TestCloseWhenIdleAnswersFirst(t *testing.T) {
	a, b := pair(t)
	var c *Conn
	c = NewConn(a, Options{Handler: HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		c.CloseWhenIdle()
		return "bye", nil
	})})
	go c.Run()
	fmt.Fprintln(b, `{"jsonrpc":"2.0","id":1,"method":"quit"}`)
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(b).ReadString('\n')
	if err != nil || line != `{"jsonrpc":"2.0","id":1,"result":"bye"}`+"\n" {
		t.Fatalf("got %q, %v", line, err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed")
	}
}

// eofSignal is a connection that closes seen when a read returns io.EOF.
type eofSignal struct {
	*net.UnixConn
	once sync.Once
	seen chan struct{}
}

func (e *eofSignal) Read(p []byte) (int, error) {
	n, err := e.UnixConn.Read(p)
	if errors.Is(err, io.EOF) {
		e.once.Do(func() { close(e.seen) })
	}
	return n, err
}

// A connection whose peer leaves with a request in flight ends, and
// leaves no goroutine behind.
func TestNoGoroutineLeak(t *testing.T) {
	testkit.CheckGoroutines(t)
	for range 20 {
		a, b := pair(t)
		eof := &eofSignal{UnixConn: a, seen: make(chan struct{})}
		c := NewConn(eof, Options{Handler: echoHandler(eof.seen)})
		done := make(chan struct{})
		go func() { c.Run(); close(done) }()
		fmt.Fprintln(b, `{"jsonrpc":"2.0","id":1,"method":"slow"}`)
		b.Close()
		<-done
	}
}

// A batch runs at most batchParallel requests at once, and a batch over
// MaxBatch is refused whole with one error; the connection goes on.
func TestBatchBounds(t *testing.T) {
	a, b := pair(t)
	var running, peak atomic.Int32
	// The first batchParallel handlers wait for one another, so that they
	// overlap: were the bound broken, more would run meanwhile.
	full := make(chan struct{})
	var once sync.Once
	c := NewConn(a, Options{MaxBatch: 20, Handler: HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n >= batchParallel {
			once.Do(func() { close(full) })
		}
		select {
		case <-full:
		case <-time.After(5 * time.Second):
			return nil, errors.New("fewer than batchParallel handlers ran at once")
		}
		return "ok", nil
	})})
	go c.Run()
	defer c.Close()
	rd := bufio.NewReader(b)
	b.SetDeadline(time.Now().Add(10 * time.Second))
	batch := func(n int) string {
		var sb strings.Builder
		sb.WriteByte('[')
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"jsonrpc":"2.0","id":%d,"method":"x"}`, i)
		}
		sb.WriteString("]\n")
		return sb.String()
	}
	io.WriteString(b, batch(21))
	line, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(line, `"code":-32600`) || !strings.Contains(line, `"limit":20`) || line[0] != '{' {
		t.Fatalf("oversized batch: %q, %v", line, err)
	}
	io.WriteString(b, batch(20))
	line, err = rd.ReadString('\n')
	if err != nil || strings.Count(line, `"result":"ok"`) != 20 {
		t.Fatalf("batch of 20: %q, %v", line, err)
	}
	if p := peak.Load(); p != batchParallel {
		t.Errorf("%d requests of one batch ran at once, want %d", p, batchParallel)
	}
}

// wroteConn signals each Write that has returned.
type wroteConn struct {
	*net.UnixConn
	wrote chan error
}

func (c *wroteConn) Write(p []byte) (int, error) {
	n, err := c.UnixConn.Write(p)
	c.wrote <- err
	return n, err
}

// A peer that writes an error with a null id and hangs up (pcpd refusing
// a connection over a limit) is heard: calls fail with that error, not
// with a bare "connection closed", whether they were sent before the
// refusal was read, after the connection closed, or into the closed
// socket before the read loop got to the refusal.
func TestCallFailsWithThePeersLastWords(t *testing.T) {
	forReadModes(t, testCallFailsWithThePeersLastWords)
}

func testCallFailsWithThePeersLastWords(t *testing.T, opts Options) {
	testkit.CheckGoroutines(t)
	const refusal = `{"jsonrpc":"2.0","id":null,"error":{"code":-32018,"message":"connection refused: full","data":{"scope":"connections","limit":3}}}` + "\n"
	check := func(t *testing.T, err error) {
		t.Helper()
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeRateLimited || e.Message != "connection refused: full" {
			t.Errorf("call on a refused connection: %v, want the peer's RATE_LIMITED refusal", err)
		}
		if !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
			t.Errorf("%v does not match ErrClosed", err)
		}
	}
	refuse := func(peer *net.UnixConn) {
		io.WriteString(peer, refusal)
		peer.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("pending", func(t *testing.T) {
		a, b := pair(t)
		c := NewConn(a, opts)
		go c.Run()
		defer c.Close()
		errc := make(chan error, 1)
		go func() { errc <- c.Call(ctx, "health.check", nil, nil) }()
		bufio.NewReader(b).ReadString('\n') // the request arrived
		refuse(b)
		check(t, <-errc)
	})
	t.Run("after the close", func(t *testing.T) {
		a, b := pair(t)
		c := NewConn(a, opts)
		refuse(b)
		go c.Run()
		if !opts.ReadOnDemand { // else the call reads the refusal itself
			<-c.Done()
		}
		check(t, c.Call(ctx, "health.check", nil, nil))
	})
	t.Run("written into the closed socket", func(t *testing.T) {
		a, b := pair(t)
		wc := &wroteConn{UnixConn: a, wrote: make(chan error, 4)}
		c := NewConn(wc, opts)
		defer c.Close()
		refuse(b)
		errc := make(chan error, 1)
		go func() { errc <- c.Call(ctx, "health.check", nil, nil) }()
		if err := <-wc.wrote; err == nil {
			t.Fatal("writing to a closed peer succeeded")
		}
		go c.Run() // only now is the refusal read
		check(t, <-errc)
	})
	t.Run("earlier null-id errors are forgotten", func(t *testing.T) {
		a, b := pair(t)
		c := NewConn(a, opts)
		go c.Run()
		errc := make(chan error, 1)
		go func() { errc <- c.Call(ctx, "health.check", nil, nil) }()
		bufio.NewReader(b).ReadString('\n')
		io.WriteString(b, refusal+`{"jsonrpc":"2.0","method":"note"}`+"\n")
		b.Close()
		if err := <-errc; err != ErrClosed {
			t.Errorf("call after a null-id error followed by another message: %v, want ErrClosed", err)
		}
	})
}
