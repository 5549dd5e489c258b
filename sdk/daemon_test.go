package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
	"github.com/pcp-dev/pcp/internal/testkit"
	"github.com/pcp-dev/pcp/internal/tier1"
)

// This file is a test double of pcpd's side of the Tier 1 protocol, over
// real Unix sockets: a JSON-RPC agent socket that answers apps.socket,
// and per-app listeners whose connections the test drives frame by frame
// as a peer.

const testApp = "org.example.todo"

// testManifest has irregular spacing so that a test sees whether it is
// passed on verbatim.
var testManifest = json.RawMessage(`{"app_id": "org.example.todo",  "version":"1", "capabilities": [], "signature": "c2ln"}`)

// waitTime bounds every wait of these tests for the SDK.
const waitTime = 5 * time.Second

// sockDir returns a directory for sockets, short enough for the 108-byte
// limit of a socket path.
func sockDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir) > 70 {
		var err error
		if dir, err = os.MkdirTemp("", "sdk"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return dir
}

// daemon is the double of pcpd.
type daemon struct {
	t     *testing.T
	dir   string
	agent string // the agent socket's path

	mu       sync.Mutex
	rpcLn    net.Listener
	rpcConns []*jsonrpc.Conn
	calls    []api.AppsSocketParams // apps.socket requests received
	answers  []func() (any, error)  // answers to the next apps.socket calls, in order
	appSock  string                 // the per-app socket apps.socket names by default
	appLn    net.Listener           // listening at appSock
	accepted chan net.Conn          // per-app connections, for accept
	conns    []net.Conn             // every per-app connection, closed at cleanup
	wg       sync.WaitGroup         // accept loops and JSON-RPC connections
	quit     chan struct{}          // closed at cleanup
}

// newDaemon starts the double: the agent socket and a first per-app
// socket, app-1.sock.
func newDaemon(t *testing.T) *daemon {
	// First, so that the check runs after every cleanup: the daemon's,
	// and startServe's, which waits for Serve to return.
	testkit.CheckGoroutines(t)
	d := &daemon{t: t, dir: sockDir(t), accepted: make(chan net.Conn, 16), quit: make(chan struct{})}
	d.agent = filepath.Join(d.dir, "pcp.sock")
	d.startAgent()
	d.listenApp("app-1.sock")
	t.Cleanup(d.close)
	return d
}

// startAgent listens on the agent socket.
func (d *daemon) startAgent() {
	ln, err := net.Listen("unix", d.agent)
	if err != nil {
		d.t.Fatal(err)
	}
	d.mu.Lock()
	d.rpcLn = ln
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := jsonrpc.NewConn(nc, jsonrpc.Options{Handler: jsonrpc.HandlerFunc(d.handle)})
			d.mu.Lock()
			d.rpcConns = append(d.rpcConns, c)
			d.mu.Unlock()
			d.wg.Add(1)
			go func() { defer d.wg.Done(); c.Run() }()
		}
	}()
}

// stopAgent closes the agent socket (and removes its file): the daemon is
// down for new apps.
func (d *daemon) stopAgent() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rpcLn.Close()
}

func (d *daemon) handle(ctx context.Context, m *jsonrpc.Message) (any, error) {
	if m.Method != api.MethodAppsSocket {
		return nil, api.Errorf(api.CodeMethodNotFound, nil, "method not found: %s", m.Method)
	}
	var p api.AppsSocketParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return nil, api.InvalidParam("params", "%v", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, p)
	if len(d.answers) > 0 {
		answer := d.answers[0]
		d.answers = d.answers[1:]
		return answer()
	}
	return &api.AppsSocketResult{AppID: p.AppID, Socket: d.appSock}, nil
}

// answerNext queues the answer to the next apps.socket call.
func (d *daemon) answerNext(f func() (any, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers = append(d.answers, f)
}

// refuseNext answers the next apps.socket call with err.
func (d *daemon) refuseNext(err *api.Error) {
	d.answerNext(func() (any, error) { return nil, err })
}

// rendezvous returns the apps.socket calls received so far.
func (d *daemon) rendezvous() []api.AppsSocketParams {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]api.AppsSocketParams(nil), d.calls...)
}

// listenApp replaces the per-app listener by one at dir/name, as a
// restarted daemon would; the old socket file is removed.
func (d *daemon) listenApp(name string) string {
	path := filepath.Join(d.dir, name)
	ln, err := net.Listen("unix", path)
	if err != nil {
		d.t.Fatal(err)
	}
	d.mu.Lock()
	if d.appLn != nil {
		d.appLn.Close()
	}
	d.appLn, d.appSock = ln, path
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			d.mu.Lock()
			d.conns = append(d.conns, nc)
			d.mu.Unlock()
			select {
			case d.accepted <- nc:
			case <-d.quit:
				return
			}
		}
	}()
	return path
}

// accept returns the next connection to a per-app socket.
func (d *daemon) accept() *peer {
	d.t.Helper()
	select {
	case nc := <-d.accepted:
		return &peer{t: d.t, nc: nc, fr: frame.NewReader(nc, 0)}
	case <-time.After(waitTime):
		d.t.Fatalf("no connection to the per-app socket within %s", waitTime)
		return nil
	}
}

func (d *daemon) close() {
	close(d.quit)
	d.mu.Lock()
	d.rpcLn.Close()
	if d.appLn != nil {
		d.appLn.Close()
	}
	for _, c := range d.rpcConns {
		c.Close()
	}
	for _, c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// peer is the daemon's end of one per-app connection.
type peer struct {
	t  *testing.T
	nc net.Conn
	fr *frame.Reader
}

// send writes m as a frame.
func (p *peer) send(m tier1.Message) {
	p.t.Helper()
	b, err := tier1.Encode(m)
	if err != nil {
		p.t.Fatalf("encoding %T: %v", m, err)
	}
	p.write(m.Type(), b)
}

// write writes one frame, any type, any payload.
func (p *peer) write(typ frame.Type, payload []byte) {
	p.t.Helper()
	p.nc.SetWriteDeadline(time.Now().Add(waitTime))
	if err := frame.Write(p.nc, frame.Frame{Type: typ, Payload: payload}); err != nil {
		p.t.Fatalf("writing %s: %v", typ, err)
	}
}

// next reads the next frame, its payload copied.
func (p *peer) next() frame.Frame {
	p.t.Helper()
	p.nc.SetReadDeadline(time.Now().Add(waitTime))
	f, err := p.fr.Next()
	if err != nil {
		p.t.Fatalf("reading the app's next frame: %v", err)
	}
	f.Payload = bytes.Clone(f.Payload)
	return f
}

// recv reads and decodes the next frame, which must be a valid Tier 1
// payload.
func (p *peer) recv() any {
	p.t.Helper()
	f := p.next()
	m, err := tier1.Decode(f.Type, f.Payload)
	if err != nil {
		p.t.Fatalf("the app sent a %s the daemon cannot decode: %v (payload %x)", f.Type, err, f.Payload)
	}
	return m
}

// expect reads the next message and compares it with want.
func (p *peer) expect(want any) {
	p.t.Helper()
	if diff := cmp.Diff(want, p.recv()); diff != "" {
		p.t.Errorf("reply (-want +got):\n%s", diff)
	}
}

// roundTrip sends m and returns the reply.
func (p *peer) roundTrip(m tier1.Message) any {
	p.t.Helper()
	p.send(m)
	return p.recv()
}

// handshake sends GetManifest and checks the ManifestResponse carries the
// manifest verbatim.
func (p *peer) handshake() {
	p.t.Helper()
	p.send(&tier1.GetManifest{})
	p.expect(&tier1.ManifestResponse{AppID: testApp, Manifest: testManifest})
}

// expectClosed checks the app closes the connection without sending
// anything more.
func (p *peer) expectClosed() {
	p.t.Helper()
	p.nc.SetReadDeadline(time.Now().Add(waitTime))
	f, err := p.fr.Next()
	switch {
	case err == nil:
		p.t.Errorf("got a %s frame, want the connection closed", f.Type)
	case !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err):
		p.t.Errorf("got %v, want the connection closed", err)
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "connection reset") }

// serving is one Serve running on its own goroutine.
type serving struct {
	cancel context.CancelFunc
	result chan error    // Serve's result, buffered
	done   chan struct{} // closed when Serve has returned
}

// startServe runs Serve(srv) against d. Its cleanup cancels it and waits
// for it; newDaemon's leak check then sees it left no goroutine behind.
func startServe(t *testing.T, d *daemon, srv PcpServer, opts *Options) *serving {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	o.AgentSocket = d.agent
	if o.Logger == nil {
		o.Logger = testLogger(t, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{cancel: cancel, result: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.result <- Serve(ctx, testApp, srv, &o)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(waitTime):
			t.Errorf("Serve did not return within %s of cancel", waitTime)
		}
	})
	return s
}

// wait returns Serve's result.
func (s *serving) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.result:
		return err
	case <-time.After(waitTime):
		t.Fatalf("Serve did not return within %s", waitTime)
		return nil
	}
}

// testLogger logs to t at debug level, and to logs too when it is not
// nil.
func testLogger(t *testing.T, logs *logWatch) *slog.Logger {
	var w io.Writer = tWriter{t}
	if logs != nil {
		w = io.MultiWriter(w, logs)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logWatch keeps what a logger wrote and lets a test wait for a line: the
// SDK's log is the event that says it tried and failed.
type logWatch struct {
	mu    sync.Mutex
	text  strings.Builder
	grown chan struct{} // closed, and replaced, at each write
}

func newLogWatch() *logWatch { return &logWatch{grown: make(chan struct{})} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text.Write(p)
	close(w.grown)
	w.grown = make(chan struct{})
	return len(p), nil
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.String()
}

// waitFor waits until the logs hold substr at least n times.
func (w *logWatch) waitFor(t *testing.T, substr string, n int) {
	t.Helper()
	timeout := time.After(waitTime)
	for {
		w.mu.Lock()
		got, grown := strings.Count(w.text.String(), substr), w.grown
		w.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-grown:
		case <-timeout:
			t.Fatalf("%d log lines with %q within %s, want %d; logs:\n%s", got, substr, waitTime, n, w.String())
		}
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
