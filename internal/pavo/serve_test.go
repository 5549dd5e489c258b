package pavo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
)

// serveLines runs Serve over input with d and returns the reply lines.
func serveLines(t *testing.T, d *Driver, input string) []string {
	t.Helper()
	var out bytes.Buffer
	if err := Serve(context.Background(), strings.NewReader(input), &out, d); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	s := strings.TrimSuffix(out.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestHostileLines feeds lines no host should send, each followed by a
// manifest request: each gets exactly one ok:false line, and the driver
// goes on serving.
func TestHostileLines(t *testing.T) {
	t.Parallel()
	hostile := []string{
		"\x00\x01\x02\xff\xfe binary",
		"\xef\xbb\xbf{\"op\":\"manifest\"}", // a byte order mark
		`{"op":"manifest"`,
		`}`,
		`{"op":null}`,
		`{"op":1e400}`,
		`{"op":"view","view":{"$ne":null}}`,
		`{"op":"manifest","op":"views"}`,
		`{"op":"submit","view":"apps","values":{"app_id":"a","app_id":"b"}}`,
		`{"op":"view","view":"apps","params":` + strings.Repeat(`{"a":`, 600) + `1` + strings.Repeat(`}`, 600) + `}`,
		strings.Repeat("[", 100000),
		`{"op":"render","kind":"pcp.element-tree","node":{},"surface":"web","data":{"elements":{"root":"nope"}}}`,
		`{"op":"render","kind":"pcp.audit-chain","node":{"query":{"x":1}},"surface":"cli","data":{}}`,
		`{"op":"query","query":"invoke.capability","params":{"capability_id":"x"}}`,
		`{"op":"view","view":"__proto__"}`,
		"{\"op\":\"manifest\"}\r\x00",
		"\u00a0\u00a0", // not JSON white space: not a blank line
		`{"op":"views"` + strings.Repeat(" ", 10) + `,"op":"x"}`,
		`"` + strings.Repeat("\\u0000", 1000) + `"`,
		`{"op":"view","view":"` + strings.Repeat("é", 5000) + `"}`,
	}
	d := &Driver{Daemon: demoDaemon()}
	var in strings.Builder
	for _, h := range hostile {
		in.WriteString(h + "\n" + `{"op":"manifest"}` + "\n")
	}
	// A line longer than the limit, twice over, and then the end.
	long := `{"op":"manifest","pad":"` + strings.Repeat("x", 3*DefaultMaxLine) + `"}`
	in.WriteString(long + "\n" + `{"op":"manifest"}` + "\n")
	got := serveLines(t, d, in.String())
	if want := 2*len(hostile) + 2; len(got) != want {
		t.Fatalf("got %d reply lines for %d request lines", len(got), want)
	}
	for i := 0; i < len(got); i += 2 {
		what := "the long line"
		if i/2 < len(hostile) {
			what = fmt.Sprintf("%.60q", hostile[i/2])
		}
		var bad struct {
			OK     *bool           `json:"ok"`
			Error  string          `json:"error"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(got[i]), &bad); err != nil || bad.OK == nil || *bad.OK || bad.Error == "" || bad.Result != nil {
			t.Errorf("%s: got %.300s, want one ok:false line", what, got[i])
		}
		if !strings.HasPrefix(got[i+1], `{"ok":true,"result":{"name":"pcp"`) {
			t.Errorf("after %s: got %.100s, want the manifest", what, got[i+1])
		}
	}
	if want := fmt.Sprintf(`{"ok":false,"error":"line too long: %d bytes exceeds the limit of %d bytes"}`, len(long), DefaultMaxLine); got[len(got)-2] != want {
		t.Errorf("long line: got %s, want %s", got[len(got)-2], want)
	}
}

// TestLineFraming: blank lines are skipped, \r\n is a newline, a last
// line without a newline is served, the limit is exact.
func TestLineFraming(t *testing.T) {
	t.Parallel()
	d := &Driver{MaxLine: 64}
	manifest := `{"op":"views"}`
	exact := `{"op":"views","pad":"` + strings.Repeat("x", 64-len(`{"op":"views","pad":""}`)) + `"}`
	over := exact[:len(exact)-2] + `x"}`
	got := serveLines(t, d, "\n  \t\n"+manifest+"\r\n\r\n"+exact+"\n"+over+"\r\n"+manifest)
	if len(got) != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i, ok := range []bool{true, true, false, true} {
		if strings.HasPrefix(got[i], `{"ok":true`) != ok {
			t.Errorf("line %d: got %.100s, want ok %v", i, got[i], ok)
		}
	}
	if want := `{"ok":false,"error":"line too long: 65 bytes exceeds the limit of 64 bytes"}`; got[2] != want {
		t.Errorf("got %s, want %s", got[2], want)
	}
}

func TestServeEnds(t *testing.T) {
	t.Parallel()
	before := runtime.NumGoroutine()

	// EOF: nil, at once.
	if err := Serve(context.Background(), strings.NewReader(""), io.Discard, &Driver{}); err != nil {
		t.Errorf("Serve at EOF: %v", err)
	}

	// Cancellation while waiting for a line: nil, and the reader ends once
	// its input does.
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, pr, io.Discard, &Driver{}) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context was cancelled")
	}
	pw.Close()

	// A reader that fails: the error.
	boom := errors.New("boom")
	if err := Serve(context.Background(), io.MultiReader(strings.NewReader(`{"op":"views"}`+"\n"), errReader{boom}), io.Discard, &Driver{}); !errors.Is(err, boom) {
		t.Errorf("Serve with a failing reader: got %v, want %v", err, boom)
	}

	// A writer that fails: the error.
	if err := Serve(context.Background(), strings.NewReader(`{"op":"views"}`+"\n"), errWriter{boom}, &Driver{}); !errors.Is(err, boom) {
		t.Errorf("Serve with a failing writer: got %v, want %v", err, boom)
	}

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left running, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

type panicDaemon struct{}

func (panicDaemon) Call(context.Context, string, any, any) error { panic("the daemon exploded") }

// TestPanicRecovered: a panic in an op becomes its ok:false line, the
// driver reports it and serves the next line.
func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reported []string
	d := &Driver{Daemon: panicDaemon{}, OnPanic: func(op string, v any, stack []byte) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, fmt.Sprintf("%s: %v", op, v))
		if len(stack) == 0 {
			t.Error("OnPanic got no stack")
		}
	}}
	got := serveLines(t, d, `{"op":"jobs"}`+"\n"+`{"op":"views"}`+"\n")
	if len(got) != 2 || got[0] != `{"ok":false,"error":"internal error in jobs: the daemon exploded"}` || !strings.HasPrefix(got[1], `{"ok":true`) {
		t.Errorf("got %q", got)
	}
	if len(reported) != 1 || reported[0] != "jobs: the daemon exploded" {
		t.Errorf("OnPanic got %q", reported)
	}
}

// fakeConn is a Conn whose calls fail with net.ErrClosed once it is
// closed (as the client's do).
type fakeConn struct {
	id     int
	mu     sync.Mutex
	done   chan struct{}
	closed bool
	// dieOnCall closes the connection during the next call, as a daemon
	// that goes away mid-request.
	dieOnCall bool
	calls     []string
}

func newFakeConn(id int) *fakeConn { return &fakeConn{id: id, done: make(chan struct{})} }

func (c *fakeConn) Call(_ context.Context, method string, _, result any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, method)
	if c.dieOnCall && !c.closed {
		c.closed = true
		close(c.done)
	}
	if c.closed {
		return fmt.Errorf("jsonrpc: connection closed: %w", net.ErrClosed)
	}
	if r, ok := result.(*json.RawMessage); ok {
		*r = json.RawMessage(fmt.Sprintf(`{"conn":%d}`, c.id))
	}
	return nil
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }

func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	return nil
}

func TestRedial(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var conns []*fakeConn
	var dialErr error
	r := &Redial{Dial: func(context.Context) (Conn, error) {
		if dialErr != nil {
			return nil, dialErr
		}
		c := newFakeConn(len(conns) + 1)
		conns = append(conns, c)
		return c, nil
	}}
	call := func(method string) (string, error) {
		var raw json.RawMessage
		err := r.Call(ctx, method, nil, &raw)
		return string(raw), err
	}
	// Lazy: no dial before the first call; one connection reused.
	if len(conns) != 0 {
		t.Fatal("dialed before the first call")
	}
	for range 2 {
		if got, err := call(api.MethodHealthCheck); err != nil || got != `{"conn":1}` {
			t.Fatalf("call: %s, %v", got, err)
		}
	}
	// The connection ended between calls (pcpd restarted): a new one.
	conns[0].Close()
	if got, err := call(api.MethodHealthCheck); err != nil || got != `{"conn":2}` {
		t.Fatalf("after the connection ended: %s, %v; want a call on connection 2", got, err)
	}
	// It ends during a read: retried once on a new connection.
	conns[1].dieOnCall = true
	if got, err := call(api.MethodAppsList); err != nil || got != `{"conn":3}` {
		t.Fatalf("a read on a connection that died: %s, %v; want it retried on connection 3", got, err)
	}
	// It ends during a write: not sent again.
	conns[2].dieOnCall = true
	if _, err := call(api.MethodConfirmApprove); !errors.Is(err, errClosed) {
		t.Fatalf("a write on a connection that died: %v, want %v", err, errClosed)
	}
	if len(conns) != 3 {
		t.Fatalf("a write was retried on a new connection")
	}
	// pcpd is down: the dial's error, and a dial again at the next call.
	dialErr = errors.New("connect: no such file or directory")
	if _, err := call(api.MethodHealthCheck); err == nil || err.Error() != "pcpd is not reachable: connect: no such file or directory" {
		t.Fatalf("with pcpd down: %v", err)
	}
	dialErr = nil
	if got, err := call(api.MethodHealthCheck); err != nil || got != `{"conn":4}` {
		t.Fatalf("with pcpd back: %s, %v", got, err)
	}
	if err := r.Close(); err != nil || !conns[3].closed {
		t.Errorf("Close: %v; connection closed: %v", err, conns[3].closed)
	}
	// No Dial at all: a clear error.
	if err := (&Redial{}).Call(ctx, "x", nil, nil); !errors.Is(err, errNoDaemon) {
		t.Errorf("Redial without Dial: %v", err)
	}
}

// TestDaemonErrors: how a failed call reads in an op's error.
func TestDaemonErrors(t *testing.T) {
	t.Parallel()
	f := &fakeDaemon{}
	f.fail(api.MethodHealthCheck, api.Errorf(api.CodeInternalError, nil, "disk full"))
	f.fail(api.MethodAuditVerify, &api.Error{Code: api.CodeRateLimited})
	f.fail(api.MethodAppsList, context.DeadlineExceeded)
	d := &Driver{Daemon: f, CallTimeout: 1500 * time.Millisecond}
	tests := []struct{ line, want string }{
		{`{"op":"query","query":"health"}`, `query "health": health.check: INTERNAL_ERROR: disk full`},
		{`{"op":"query","query":"audit_chain"}`, `query "audit_chain": audit.verify: RATE_LIMITED: Rate limited`},
		{`{"op":"query","query":"apps"}`, `query "apps": apps.list: no reply from pcpd within 1.5s`},
		{`{"op":"query","query":"jobs.list"}`, `query "jobs.list": jobs.list: METHOD_NOT_FOUND: method not found: jobs.list`},
	}
	for _, tt := range tests {
		ok, _, got := replyOf(t, d, tt.line)
		if ok || got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.line, got, tt.want)
		}
	}
	if ok, _, got := replyOf(t, &Driver{}, `{"op":"jobs"}`); ok || got != "jobs: jobs.list: no connection to pcpd is configured" {
		t.Errorf("without a daemon: %q", got)
	}
}
