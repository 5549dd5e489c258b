package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
)

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return mk(fds[0]), mk(fds[1])
}

func echoHandler() Handler {
	return HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		switch m.Method {
		case "echo":
			return m.Params, nil
		case "fail":
			return nil, api.Errorf(api.CodeAppNotFound, map[string]any{"app_id": "x"}, "no app")
		case "panic":
			panic("boom")
		case "slow":
			time.Sleep(50 * time.Millisecond)
			return "done", nil
		}
		return nil, api.ErrMethodNotFound
	})
}

func TestConnBothDirections(t *testing.T) {
	a, b := pair(t)
	ca := NewConn(a, Options{Handler: echoHandler()})
	cb := NewConn(b, Options{Handler: echoHandler()})
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

func TestCallContextAndClose(t *testing.T) {
	a, b := pair(t)
	ca := NewConn(a, Options{})
	go ca.Run()
	// b never answers.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := ca.Call(ctx, "x", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want deadline exceeded", err)
	}
	done := make(chan error, 1)
	go func() { done <- ca.Call(context.Background(), "x", nil, nil) }()
	time.Sleep(10 * time.Millisecond)
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
	a, b := pair(t)
	c := NewConn(a, Options{Handler: echoHandler()})
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

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 20 {
		a, b := pair(t)
		c := NewConn(a, Options{Handler: echoHandler()})
		done := make(chan struct{})
		go func() { c.Run(); close(done) }()
		fmt.Fprintln(b, `{"jsonrpc":"2.0","id":1,"method":"slow"}`)
		b.Close()
		<-done
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Errorf("goroutines: %d before, %d after", before, n)
	}
}
