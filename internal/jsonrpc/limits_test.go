package jsonrpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/deadline"
)

var echo = HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
	if m.Method == "panic" {
		panic("secret text")
	}
	return "ok", nil
})

// serveTest runs a Conn over one end of a pipe and returns the other.
func serveTest(t *testing.T, opts Options) (peer net.Conn, rd *bufio.Reader, done <-chan error) {
	t.Helper()
	a, b := net.Pipe()
	ch := make(chan error, 1)
	finished := make(chan struct{})
	c := NewConn(a, opts)
	go func() { ch <- c.Run(); close(finished) }()
	t.Cleanup(func() { b.Close(); <-finished })
	return b, bufio.NewReader(b), ch
}

func TestIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var duty atomic.Bool
		duty.Store(true)
		peer, rd, done := serveTest(t, Options{Handler: echo, IdleTimeout: time.Minute, KeepAlive: duty.Load})
		io.WriteString(peer, `{"jsonrpc":"2.0","id":1,"method":"x"}`+"\n")
		rd.ReadString('\n')
		time.Sleep(10 * time.Minute) // on duty: kept
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("a connection on duty was closed: %v", err)
		default:
		}
		duty.Store(false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, ErrIdle) {
				t.Errorf("Run: %v, want ErrIdle", err)
			}
		default:
			t.Fatal("an idle connection without duties outlived its timeout")
		}
	})
}

func TestMessageTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		peer, rd, done := serveTest(t, Options{Handler: echo, MessageTimeout: 10 * time.Second})
		go io.WriteString(peer, `{"jsonrpc":"2.0","id":1,"meth`)
		synctest.Wait()
		start := time.Now()
		line, _ := rd.ReadString('\n')
		if !strings.Contains(line, "within 10s") || time.Since(start) != 10*time.Second {
			t.Errorf("after %v: %q, want the message deadline's error at 10s", time.Since(start), line)
		}
		if err := <-done; !errors.Is(err, ErrMessageTimeout) {
			t.Errorf("Run: %v, want ErrMessageTimeout", err)
		}
	})
}

func TestGate(t *testing.T) {
	auth := HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
		if m.Method == "auth" && strings.Contains(string(m.Params), "right") {
			return "ok", nil
		}
		return nil, api.Errorf(api.CodePermissionDenied, nil, "no")
	})
	gate := &Gate{Method: "auth", MaxLine: 64, Timeout: 10 * time.Second}
	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, rd, _ := serveTest(t, Options{Handler: auth, Gate: gate})
			start := time.Now()
			if _, err := rd.ReadString('\n'); err != io.EOF || time.Since(start) != 10*time.Second {
				t.Errorf("after %v: %v, want EOF at the gate's 10s", time.Since(start), err)
			}
		})
	})
	for _, tc := range []struct{ name, first, want string }{
		{"wrong", `{"jsonrpc":"2.0","id":1,"method":"auth","params":{"t":"wrong"}}`, `"message":"no"`},
		{"other method", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"t":"right"}}`, `"message":"no"`},
		{"notification", `{"jsonrpc":"2.0","method":"auth","params":{"t":"right"}}`, "alone"},
		{"too long", `{"jsonrpc":"2.0","id":1,"method":"auth","params":{"t":"right` + strings.Repeat(" ", 64) + `"}}`, "exceeds the limit of 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer, rd, _ := serveTest(t, Options{Handler: auth, Gate: gate})
			go io.WriteString(peer, tc.first+"\n"+`{"jsonrpc":"2.0","id":2,"method":"auth","params":{"t":"right"}}`+"\n")
			out, _ := io.ReadAll(rd)
			if !strings.Contains(string(out), tc.want) || strings.Count(string(out), "\n") != 1 {
				t.Errorf("got %q, want one answer with %s, then the close", out, tc.want)
			}
		})
	}
	// An oversized first line is answered when the bound is crossed, not
	// when its newline (which may never come) or the gate's timeout does.
	t.Run("too long, unterminated", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			peer, rd, _ := serveTest(t, Options{Handler: auth, Gate: gate})
			go io.WriteString(peer, `{"jsonrpc":"2.0","id":7,"method":"auth","params":{"t":"`+strings.Repeat("x", 1000))
			start := time.Now()
			out, _ := io.ReadAll(rd)
			want := `{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"line exceeds the limit of 64 bytes; closing","data":{"limit":64}}}` + "\n"
			if string(out) != want || time.Since(start) != 0 {
				t.Errorf("after %v: %q, want at once %q, then the close", time.Since(start), out, want)
			}
		})
	})
	t.Run("passed", func(t *testing.T) {
		peer, rd, _ := serveTest(t, Options{Handler: auth, Gate: gate})
		go io.WriteString(peer, `{"jsonrpc":"2.0","id":1,"method":"auth","params":{"t":"right"}}`+"\n"+
			`{"jsonrpc":"2.0","id":2,"method":"auth","params":{"t":"right`+strings.Repeat(" ", 1000)+`"}}`+"\n")
		for i := range 2 {
			if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"result":"ok"`) {
				t.Fatalf("line %d: %q, %v; want ok (lines past the gate are bounded by MaxLine)", i, line, err)
			}
		}
	})
}

func TestPanicIsPlainInternalError(t *testing.T) {
	var logged atomic.Value
	peer, rd, _ := serveTest(t, Options{Handler: echo, OnPanic: func(v any, stack []byte) { logged.Store(v) }})
	go io.WriteString(peer, `{"jsonrpc":"2.0","id":1,"method":"panic"}`+"\n")
	line, _ := rd.ReadString('\n')
	if want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal error"}}` + "\n"; line != want {
		t.Errorf("got %q, want %q", line, want)
	}
	if logged.Load() != "secret text" {
		t.Errorf("OnPanic got %v", logged.Load())
	}
}

// A long line's buffer is given back, to the budget and to the garbage
// collector, once the next line is read; a line the budget cannot hold
// is skipped with the stream kept in sync.
func TestLineReaderBudget(t *testing.T) {
	budget := deadline.NewBudget(300 << 10)
	long := strings.Repeat("x", 200<<10)
	lr := NewLineReader(strings.NewReader(long+"\n"+"a\n"+long+"\n"+"b\n"), DefaultMaxLine)
	lr.Budget = budget
	if line, err := lr.ReadLine(); err != nil || len(line) != len(long) {
		t.Fatalf("long line: %d bytes, %v", len(line), err)
	}
	if budget.Used() == 0 {
		t.Error("a long line took nothing from the budget")
	}
	if line, err := lr.ReadLine(); err != nil || string(line) != "a" {
		t.Fatalf("next line: %q, %v", line, err)
	}
	if used := budget.Used(); used != 0 || lr.buf != nil {
		t.Errorf("after a short line the reader still holds %d bytes of budget (buffer kept: %v)", used, lr.buf != nil)
	}
	budget.Take(250 << 10) // another connection's long line
	if _, err := lr.ReadLine(); err != ErrNoLineBudget {
		t.Errorf("long line without budget: %v, want ErrNoLineBudget", err)
	}
	if line, err := lr.ReadLine(); err != nil || string(line) != "b" {
		t.Errorf("after the refused line: %q, %v; want the stream in sync", line, err)
	}
}
