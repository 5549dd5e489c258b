package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// never is an inline budget no test outlasts: a test that needs the
// reading handed off must get it some other way than the timer.
const never = time.Hour

// readReplies reads n reply lines from rd (5 s each at most) and returns
// their results by id.
func readReplies(t *testing.T, rd *bufio.Reader, deadline func(time.Time) error, n int) map[int]string {
	t.Helper()
	got := map[int]string{}
	for range n {
		deadline(time.Now().Add(5 * time.Second))
		line, err := rd.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d replies: %v", len(got), err)
		}
		var r struct {
			ID     int    `json:"id"`
			Result string `json:"result"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("reply %s: %v", line, err)
		}
		got[r.ID] = r.Result
	}
	return got
}

// A peer that sends one request at a time has each served on the
// reading goroutine: no worker is ever started.
func TestLoneRequestsAreServedWithoutAWorker(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	srv := NewConn(a, Options{Handler: echoHandler(nil), InlineBudget: never})
	cli := NewConn(b, Options{})
	go srv.Run()
	go cli.Run()
	defer srv.Close()
	defer cli.Close()
	for i := range 50 {
		var got map[string]int
		if err := cli.Call(context.Background(), "echo", map[string]int{"n": i}, &got); err != nil || got["n"] != i {
			t.Fatalf("call %d: got %v, %v", i, got, err)
		}
	}
	if n := srv.rd.workers.Load(); n != 0 {
		t.Errorf("%d workers started for 50 requests sent one at a time, want 0", n)
	}
}

// Requests that arrive together are served concurrently: the first waits
// for the second, which it could not do if it were served on the reading
// goroutine.
func TestPipelinedRequestsRunConcurrently(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	released := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		switch m.Method {
		case "wait":
			select {
			case <-released:
				return "waited", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "release":
			close(released)
			return "released", nil
		}
		return nil, nil
	})
	srv := NewConn(a, Options{Handler: h, InlineBudget: never})
	go srv.Run()
	defer srv.Close()
	// One write: both lines are read before the first is served.
	fmt.Fprint(b, `{"jsonrpc":"2.0","id":1,"method":"wait"}`+"\n"+`{"jsonrpc":"2.0","id":2,"method":"release"}`+"\n")
	got := readReplies(t, bufio.NewReader(b), b.SetReadDeadline, 2)
	if got[1] != "waited" || got[2] != "released" {
		t.Errorf("replies %v, want 1: waited, 2: released", got)
	}
	if n := srv.rd.workers.Load(); n == 0 {
		t.Error("pipelined requests were served without a worker")
	}
}

// A lone request that waits for the peer's next line (here a
// notification) gets it: past the inline budget the reading moves to
// another goroutine, which reads and handles the notification.
func TestInlineRequestHandsTheReadingOffPastItsBudget(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	released := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		switch m.Method {
		case "wait":
			select {
			case <-released:
				return "waited", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "release": // a notification
			close(released)
		}
		return nil, nil
	})
	srv := NewConn(a, Options{Handler: h, InlineBudget: 5 * time.Millisecond})
	go srv.Run()
	defer srv.Close()
	fmt.Fprint(b, `{"jsonrpc":"2.0","id":1,"method":"wait"}`+"\n")
	fmt.Fprint(b, `{"jsonrpc":"2.0","method":"release"}`+"\n")
	rd := bufio.NewReader(b)
	if got := readReplies(t, rd, b.SetReadDeadline, 1); got[1] != "waited" {
		t.Fatalf("replies %v, want 1: waited", got)
	}
	// The connection reads on after the hand-off.
	fmt.Fprint(b, `{"jsonrpc":"2.0","id":2,"method":"again"}`+"\n")
	if got := readReplies(t, rd, b.SetReadDeadline, 1); len(got) != 1 {
		t.Fatalf("replies %v after the hand-off, want 1", got)
	}
}

// A lone request whose handler calls the peer on the same connection gets
// the answer: the call hands the reading off at once (the budget here is
// never reached).
func TestInlineRequestCallingItsPeerGetsTheAnswer(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	var srv *Conn
	h := HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		var s string
		if err := srv.Call(ctx, "slow", nil, &s); err != nil {
			return nil, err
		}
		return "peer said " + s, nil
	})
	srv = NewConn(a, Options{Handler: h, InlineBudget: never})
	cli := NewConn(b, Options{Handler: echoHandler(nil)})
	go srv.Run()
	go cli.Run()
	defer srv.Close()
	defer cli.Close()
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var got string
		err := cli.Call(ctx, "ask", nil, &got)
		cancel()
		if err != nil || got != "peer said done" {
			t.Fatalf("call %d: got %q, %v; want %q", i, got, err, "peer said done")
		}
	}
}

// A request left behind by a hand-off holds a worker's slot: with
// MaxInFlight 2, a blocked lone request and three more sent after it
// never run more than two handlers at once, and all are answered. (In a
// bubble, so that "every handler that can start has started" is an
// event: synctest.Wait.)
func TestHandOffKeepsTheInFlightBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		var running atomic.Int32
		release := make(chan struct{})
		h := HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
			running.Add(1)
			defer running.Add(-1)
			<-release
			return "ok", nil
		})
		srv := NewConn(a, Options{Handler: h, MaxInFlight: 2, InlineBudget: time.Millisecond})
		go srv.Run()
		go fmt.Fprint(b, `{"jsonrpc":"2.0","id":1,"method":"block"}`+"\n")
		synctest.Wait() // served inline, alone
		var lines strings.Builder
		for id := 2; id <= 4; id++ {
			fmt.Fprintf(&lines, `{"jsonrpc":"2.0","id":%d,"method":"block"}`+"\n", id)
		}
		go fmt.Fprint(b, lines.String())
		time.Sleep(2 * time.Millisecond) // the bubble's clock: past the budget, the reading moves on
		synctest.Wait()
		if n := running.Load(); n != 2 {
			t.Errorf("%d handlers running, want MaxInFlight (2)", n)
		}
		close(release)
		got := readReplies(t, bufio.NewReader(b), b.SetReadDeadline, 4)
		if len(got) != 4 {
			t.Errorf("replies %v, want 4", got)
		}
		srv.Close()
		b.Close()
	})
}

// Lone requests with a budget of next to nothing hand the reading off
// again and again, at every point of their serving; with many
// connections at once nothing is lost and no goroutine outlives its
// connection.
func TestHandOffsUnderLoad(t *testing.T) {
	testkit.CheckGoroutines(t)
	var wg sync.WaitGroup
	for range 8 {
		a, b := pair(t)
		// A budget of a nanosecond: the timer races every request.
		srv := NewConn(a, Options{Handler: echoHandler(nil), InlineBudget: time.Nanosecond})
		cli := NewConn(b, Options{})
		go srv.Run()
		go cli.Run()
		wg.Go(func() {
			defer srv.Close()
			defer cli.Close()
			for i := range 50 {
				var got map[string]int
				if err := cli.Call(context.Background(), "echo", map[string]int{"n": i}, &got); err != nil || got["n"] != i {
					t.Errorf("call %d: got %v, %v", i, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Lone requests that each wait past the budget (for the peer's next
// line) hand the reading off every time, and each goroutine left behind
// leaves when its request is done: the connection grows no pool of idle
// goroutines for them.
func TestSlowLoneRequestsLeaveNoIdleGoroutines(t *testing.T) {
	testkit.CheckGoroutines(t)
	a, b := pair(t)
	started, release := make(chan struct{}), make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		if m.IsNotification() {
			release <- struct{}{}
			return nil, nil
		}
		started <- struct{}{}
		select {
		case <-release:
			return "released", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	srv := NewConn(a, Options{Handler: h, InlineBudget: time.Millisecond})
	go srv.Run()
	defer srv.Close()
	rd := bufio.NewReader(b)
	for i := range 20 {
		fmt.Fprintf(b, `{"jsonrpc":"2.0","id":%d,"method":"wait"}`+"\n", i)
		<-started // alone, so served inline; the notification is read after the hand-off
		fmt.Fprint(b, `{"jsonrpc":"2.0","method":"release"}`+"\n")
		if got := readReplies(t, rd, b.SetReadDeadline, 1); got[i] != "released" {
			t.Fatalf("round %d: replies %v", i, got)
		}
	}
	// A request read just before the one before it was done counts as
	// pipelined and may start a worker; a pool of one per slow request
	// (20) would be the leak.
	if n := srv.rd.workers.Load(); n > 4 {
		t.Errorf("%d worker slots held after 20 slow lone requests, want a handful at most", n)
	}
}
