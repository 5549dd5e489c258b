package stream

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/appsock"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/services/inspection"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
	"github.com/pcp-dev/pcp/internal/tier1"
)

// A golden transcript here is a txtar file whose "transcript" section
// holds lines addressed to named connections:
//
//	NAME> TYPE JSON       send a frame of TYPE with JSON as its payload
//	NAME> hex: 08 00 ...  send these exact bytes
//	NAME< TYPE JSON       the next frame NAME receives is exactly this one
//	rpc:NAME> JSON        send a JSON-RPC line on a JSON-RPC connection
//	rpc:NAME< JSON        the next line it receives
//	app:ID> TYPE {JSON}   on app ID's Tier 1 per-app socket, send a frame
//	                      whose CBOR payload encodes the JSON (the
//	                      internal/tier1 struct of TYPE, by field name)
//	app:ID> TYPE HEX      send a frame with this payload, in hex
//	app:ID< TYPE HEX      the next frame the app receives; what follows
//	                      " ; " is the payload decoded, for the reader
//
// A frame line stands for its exact bytes: the tag, the four-byte
// big-endian length and the payload as written. Names starting with
// "user" are the user's control socket. An app connection dials the real
// per-app socket the daemon opened for it (apps.socket first); the socket
// directory reads as $APPS in JSON-RPC lines. Consecutive frames one
// connection receives form a block in no fixed order, compared by their
// bytes (a reply and the events it caused race); JSON-RPC lines are
// compared one at a time. The broker runs on a fixed clock with
// deterministic ids; golden.Archive.Play plays the lines.
func TestGolden(t *testing.T) { golden.ForEach(t, "testdata/*.txtar", runGolden) }

type env struct {
	t      *testing.T
	b      *core.Broker
	stream *Server
	rpc    *rpc.Server
	apps   *appsock.Server
	conns  map[string]net.Conn
	wg     sync.WaitGroup
	// frames and lines read what each connection receives, by name:
	// frames on framed and per-app connections, lines on rpc: ones.
	frames map[string]*frame.Reader
	lines  map[string]*lineReader
}

func newEnv(t *testing.T) *env {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := core.New(context.Background(), core.Config{
		Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), AllowUnsigned: true, SessionID: "session-1",
		Now:        func() time.Time { return testkit.GoldenTime },
		RateLimits: &core.RateLimits{}, LivenessInterval: -1,
		NewID: testkit.SeqIDs(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.AddService(inspection.New(b)); err != nil {
		t.Fatal(err)
	}
	apps := appsock.New(b, filepath.Join(t.TempDir(), "apps"), nil)
	b.SetAppSockets(apps)
	t.Cleanup(func() { apps.Close() })
	return &env{t: t, b: b, stream: NewServer(b, Options{MaxPayload: 256}), rpc: rpc.NewServer(b, rpc.Options{}), apps: apps,
		conns: map[string]net.Conn{}, frames: map[string]*frame.Reader{}, lines: map[string]*lineReader{}}
}

func (e *env) conn(name string) net.Conn {
	if c, ok := e.conns[name]; ok {
		return c
	}
	if appID, ok := strings.CutPrefix(name, "app:"); ok {
		appID, _, _ = strings.Cut(appID, "#") // app:ID#2 is a second connection
		c, err := net.Dial("unix", e.apps.SocketPath(appID))
		if err != nil {
			e.t.Fatalf("dialing the per-app socket of %s: %v", appID, err)
		}
		e.conns[name] = c
		return c
	}
	client, server := testkit.SocketPair(e.t)
	info := core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242}
	bare := strings.TrimPrefix(name, "rpc:")
	if strings.HasPrefix(bare, "user") {
		info.Role = core.RoleUser
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if strings.HasPrefix(name, "rpc:") {
			e.rpc.ServeConn(server, info)
		} else {
			e.stream.ServeConn(server, info)
		}
	}()
	e.conns[name] = client
	return client
}

func runGolden(t *testing.T, file string) {
	// Every goroutine a transcript starts (framed and JSON-RPC connections,
	// subscription pumps, per-app sockets, the broker's and the store's)
	// ends with it.
	testkit.CheckGoroutines(t)
	ar := golden.Load(t, file)
	e := newEnv(t)
	if filepath.Base(file) == "attachments.txtar" {
		if err := e.b.AddService(tinyService{}); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range e.conns {
			c.Close()
		}
		e.wg.Wait()
	}()
	ar.Play(t, golden.Script{Conns: e, Ordered: isRPC, Key: e.key})
}

// isRPC reports whether name is a JSON-RPC connection: its lines are
// compared in order, as they come.
func isRPC(name string) bool { return strings.HasPrefix(name, "rpc:") }

// connLine returns connection name with a deadline for the next line.
func (e *env) connLine(name string) net.Conn {
	c := e.conn(name)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

// Send sends a transcript line's text on name: a JSON-RPC line on an
// rpc: connection, a frame otherwise.
func (e *env) Send(name, text string) error {
	c := e.connLine(name)
	var b []byte
	if h, ok := strings.CutPrefix(text, "hex: "); ok && !isRPC(name) {
		var err error
		if b, err = hex.DecodeString(strings.ReplaceAll(h, " ", "")); err != nil {
			return err
		}
	} else if isRPC(name) {
		b = []byte(text + "\n")
	} else {
		f, err := e.parse(name, text)
		if err != nil {
			return err
		}
		b = frame.Append(nil, f)
	}
	_, err := c.Write(b)
	return err
}

// Recv returns what name receives next, as a transcript line writes
// it: the per-app socket directory of a JSON-RPC line reads as $APPS.
func (e *env) Recv(name string) (string, error) {
	c := e.connLine(name)
	if isRPC(name) {
		lr := e.lines[name]
		if lr == nil {
			lr = &lineReader{r: c}
			e.lines[name] = lr
		}
		got, err := lr.next()
		return strings.ReplaceAll(got, e.apps.Dir(), "$APPS"), err
	}
	r := e.frames[name]
	if r == nil {
		r = frame.NewReader(c, 1<<20)
		e.frames[name] = r
	}
	f, err := r.Next()
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(name, "app:") {
		return formatAppFrame(f), nil
	}
	return f.Type.String() + " " + string(f.Payload), nil
}

// key is what a received line is compared by: a frame's bytes, however
// the line writes its payload; a JSON-RPC line itself.
func (e *env) key(name, text string) (string, error) {
	if isRPC(name) {
		return text, nil
	}
	f, err := e.parse(name, text)
	return string(frame.Append(nil, f)), err
}

// parse reads a frame line of connection name.
func (e *env) parse(name, text string) (frame.Frame, error) {
	if strings.HasPrefix(name, "app:") {
		return parseAppFrame(text)
	}
	return parseFrame(text)
}

// parseFrame reads "TYPE JSON" (or "TYPE" for an empty payload).
func parseFrame(s string) (frame.Frame, error) {
	name, payload, _ := strings.Cut(s, " ")
	t, ok := frame.ParseType(name)
	if !ok {
		return frame.Frame{}, fmt.Errorf("unknown frame type %q", name)
	}
	return frame.Frame{Type: t, Payload: []byte(payload)}, nil
}

// parseAppFrame reads "TYPE {JSON}" or "TYPE HEX ; comment" for a
// per-app socket.
func parseAppFrame(s string) (frame.Frame, error) {
	s, _, _ = strings.Cut(s, " ; ")
	name, payload, _ := strings.Cut(s, " ")
	t, ok := frame.ParseType(name)
	if !ok {
		return frame.Frame{}, fmt.Errorf("unknown frame type %q", name)
	}
	if !strings.HasPrefix(payload, "{") {
		b, err := hex.DecodeString(strings.ReplaceAll(payload, " ", ""))
		return frame.Frame{Type: t, Payload: b}, err
	}
	m := tier1Message(t)
	if m == nil {
		return frame.Frame{}, fmt.Errorf("%s has no Tier 1 payload", t)
	}
	dec := json.NewDecoder(strings.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return frame.Frame{}, fmt.Errorf("%s: %v", t, err)
	}
	b, err := tier1.Encode(m)
	return frame.Frame{Type: t, Payload: b}, err
}

// formatAppFrame writes a frame an app received as TYPE, the payload in
// hex, and the payload decoded after " ; ".
func formatAppFrame(f frame.Frame) string {
	s := f.Type.String()
	if len(f.Payload) > 0 {
		s += " " + hex.EncodeToString(f.Payload)
	}
	m, err := tier1.Decode(f.Type, f.Payload)
	if err != nil {
		return s + " ; undecodable: " + err.Error()
	}
	j, _ := json.Marshal(m)
	return s + " ; " + string(j)
}

func tier1Message(t frame.Type) tier1.Message {
	switch t {
	case frame.ManifestResponse:
		return &tier1.ManifestResponse{}
	case frame.CapabilityResultMsg:
		return &tier1.CapabilityResultMsg{}
	case frame.ValidateResultMsg:
		return &tier1.ValidateResultMsg{}
	case frame.StateResponse:
		return &tier1.StateResponse{}
	case frame.Pong:
		return &tier1.Pong{}
	case frame.GetManifest:
		return &tier1.GetManifest{}
	case frame.InvokeCapability:
		return &tier1.InvokeCapability{}
	case frame.ValidateParamsMsg:
		return &tier1.ValidateParamsMsg{}
	case frame.QueryState:
		return &tier1.QueryState{}
	case frame.AppShutdown:
		return &tier1.AppShutdown{}
	case frame.Ping:
		return &tier1.Ping{}
	}
	return nil
}

type lineReader struct {
	r   io.Reader
	buf []byte
}

func (l *lineReader) next() (string, error) {
	for {
		if i := bytes.IndexByte(l.buf, '\n'); i >= 0 {
			line := string(l.buf[:i])
			l.buf = l.buf[i+1:]
			return line, nil
		}
		var b [4096]byte
		n, err := l.r.Read(b[:])
		if err != nil {
			return "", err
		}
		l.buf = append(l.buf, b[:n]...)
	}
}

// tinyService returns small attachments, for testdata/attachments.txtar:
// "one" one, "two" two, "none" none.
type tinyService struct{}

func (tinyService) AppID() string { return "pcp.test.tiny" }

func (tinyService) Manifest() *api.Manifest {
	var decls []api.CapabilityDecl
	for _, name := range []string{"none", "one", "two"} {
		decls = append(decls, api.CapabilityDecl{Name: name, Tier: 1, TrustLevel: api.TrustAuto, Description: "Returns attachments."})
	}
	return &api.Manifest{Version: "1.0", Publisher: "pcpd", Description: "Small attachments.", Capabilities: decls}
}

func (tinyService) Invoke(_ context.Context, c *api.Capability, _ api.InvocationSource, _ json.RawMessage) (*api.CapabilityResult, error) {
	res := &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"width":2,"height":1}`)}
	switch c.ID {
	case "pcp.test.tiny.one":
		res.Attachments = []api.Attachment{{Name: "image", MediaType: "image/png", Data: []byte("\x89PNG\r\n")}}
	case "pcp.test.tiny.two":
		res.Attachments = []api.Attachment{{Name: "image", MediaType: "image/png", Data: []byte("\x89PNG\r\n")}, {Name: "empty", MediaType: "application/octet-stream"}}
	}
	return res, nil
}
