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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
// directory reads as $APPS in JSON-RPC lines. The broker runs on a fixed
// clock with deterministic ids.
func TestGolden(t *testing.T) { golden.ForEach(t, "testdata/*.txtar", runGolden) }

type env struct {
	t      *testing.T
	stream *Server
	rpc    *rpc.Server
	apps   *appsock.Server
	conns  map[string]net.Conn
	wg     sync.WaitGroup
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
	return &env{t: t, stream: NewServer(b, Options{MaxPayload: 256}), rpc: rpc.NewServer(b, rpc.Options{}), apps: apps, conns: map[string]net.Conn{}}
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
	defer func() {
		for _, c := range e.conns {
			c.Close()
		}
		e.wg.Wait()
	}()
	var out bytes.Buffer
	readers := map[string]*frame.Reader{}
	lineReaders := map[string]*lineReader{}
	lines := ar.Lines("transcript")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		name, op, rest, ok := parse(line)
		if !ok {
			out.WriteString(line + "\n")
			continue
		}
		c := e.conn(name)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		isRPC := strings.HasPrefix(name, "rpc:")
		isApp := strings.HasPrefix(name, "app:")
		switch {
		case op == '>' && isRPC:
			io.WriteString(c, rest+"\n")
		case op == '>' && isApp && !strings.HasPrefix(rest, "hex: "):
			f, err := parseAppFrame(rest)
			if err != nil {
				t.Fatalf("%s:%d: %v", file, i+1, err)
			}
			if _, err := c.Write(frame.Append(nil, f)); err != nil {
				t.Fatalf("%s:%d: write: %v", file, i+1, err)
			}
		case op == '>':
			var (
				b   []byte
				err error
			)
			if h, ok := strings.CutPrefix(rest, "hex: "); ok {
				if b, err = hex.DecodeString(strings.ReplaceAll(h, " ", "")); err != nil {
					t.Fatalf("%s:%d: %v", file, i+1, err)
				}
			} else {
				f, err := parseFrame(rest)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, i+1, err)
				}
				b = frame.Append(nil, f)
			}
			if _, err := c.Write(b); err != nil {
				t.Fatalf("%s:%d: write: %v", file, i+1, err)
			}
		case op == '<' && isRPC:
			lr := lineReaders[name]
			if lr == nil {
				lr = &lineReader{r: c}
				lineReaders[name] = lr
			}
			got, err := lr.next()
			if err != nil {
				t.Fatalf("%s:%d: %v", file, i+1, err)
			}
			got = strings.ReplaceAll(got, e.apps.Dir(), "$APPS")
			if got != rest && !*golden.Update {
				t.Fatalf("%s:%d: %s received\n got: %s\nwant: %s", file, i+1, name, got, rest)
			}
			line = name + "< " + got
		case op == '<':
			r := readers[name]
			if r == nil {
				r = frame.NewReader(c, 1<<20)
				readers[name] = r
			}
			// Consecutive frames one connection receives form a block in
			// no fixed order: a reply and the events it caused race.
			want := []string{rest}
			for i+1 < len(lines) {
				n2, op2, rest2, ok2 := parse(lines[i+1])
				if !ok2 || n2 != name || op2 != '<' {
					break
				}
				want = append(want, rest2)
				i++
			}
			var got, gotBytes, wantBytes []string
			for range want {
				f, err := r.Next()
				if err != nil {
					t.Fatalf("%s:%d: %s: reading a frame: %v (want %s)", file, i+1, name, err, rest)
				}
				if isApp {
					got = append(got, formatAppFrame(f))
				} else {
					got = append(got, f.Type.String()+" "+string(f.Payload))
				}
				gotBytes = append(gotBytes, string(frame.Append(nil, f)))
			}
			for _, w := range want {
				parse := parseFrame
				if isApp {
					parse = parseAppFrame
				}
				f, err := parse(w)
				if err != nil && !*golden.Update {
					t.Fatalf("%s:%d: %v", file, i+1, err)
				}
				wantBytes = append(wantBytes, string(frame.Append(nil, f)))
			}
			slices.Sort(gotBytes)
			slices.Sort(wantBytes)
			if !slices.Equal(gotBytes, wantBytes) {
				if !*golden.Update {
					t.Fatalf("%s:%d: %s received\n got: %s\nwant: %s", file, i+1, name, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
				}
				want = got
			}
			for _, w := range want {
				out.WriteString(name + "< " + w + "\n")
			}
			continue
		}
		out.WriteString(line + "\n")
	}
	if *golden.Update {
		ar.Save(t, "transcript", out.Bytes())
	}
}

func parse(line string) (name string, op byte, rest string, ok bool) {
	if line == "" || line[0] == '#' {
		return "", 0, "", false
	}
	i := strings.IndexAny(line, "<>")
	if i <= 0 || i+1 >= len(line) || line[i+1] != ' ' {
		return "", 0, "", false
	}
	return line[:i], line[i], line[i+2:], true
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
