package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	sdkrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/testkit"
)

var agentInfo = core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242}

// serveFace serves face on a socket pair and returns the client's end;
// the test's cleanup closes it and waits for the face to let go.
func serveFace(t *testing.T, face *Server) net.Conn {
	t.Helper()
	c, srv := testkit.SocketPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		face.ServeConn(srv, agentInfo)
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return c
}

const initLine = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
	`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"

// TestClientThatNeverReads: a client that sends requests and never
// reads the answers is closed once a write has waited WriteTimeout; the
// face serves another client meanwhile and afterwards.
func TestClientThatNeverReads(t *testing.T) {
	testkit.CheckGoroutines(t)
	face := New(newBroker(t, nil), Options{WriteTimeout: 200 * time.Millisecond})
	defer face.Close()
	stuck := serveFace(t, face)
	if _, err := io.WriteString(stuck, initLine); err != nil {
		t.Fatal(err)
	}
	req := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pcp_search","arguments":{}}}` + "\n")
	stuck.SetWriteDeadline(time.Now().Add(20 * time.Second))
	var err error
	for err == nil {
		_, err = stuck.Write(req)
	}
	if errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the face did not hang up on a client that never reads: %v", err)
	}
	other := serveFace(t, face)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "other", Version: "1"}, nil).Connect(context.Background(), &sdk.IOTransport{Reader: other, Writer: other}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "pcp_invoke", Arguments: map[string]any{"capability_id": "pcp.inspection.ping"}})
	if err != nil || res.IsError {
		t.Fatalf("another client after the stuck one: %+v, %v", res, err)
	}
}

// TestHTTPGate: Host, Origin and the bearer token are checked before
// MCP sees the request.
func TestHTTPGate(t *testing.T) {
	testkit.CheckGoroutines(t)
	face := New(newBroker(t, nil), Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	hs := &http.Server{Handler: face.HTTPHandler(addr, "secret", core.SessionInfo{Role: core.RoleAgent, Transport: "tcp", Remote: "mcp-http", UID: -1, PID: -1})}
	go hs.Serve(ln)
	defer func() { hs.Close(); face.Close() }()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct {
		name, host, origin, auth string
		want                     int
		wantText                 string
	}{
		{"rebound host", "evil.example:" + port, "", "Bearer secret", 403, "host"},
		{"other port", "127.0.0.1:1", "", "Bearer secret", 403, "host"},
		{"web page", "127.0.0.1:" + port, "https://evil.example", "Bearer secret", 403, "origin"},
		{"null origin", "127.0.0.1:" + port, "null", "Bearer secret", 403, "origin"},
		{"no token", "127.0.0.1:" + port, "", "", 401, "bearer token"},
		{"wrong token", "localhost:" + port, "", "Bearer guess", 401, "bearer token"},
		{"good", "localhost:" + port, "http://localhost:" + port, "Bearer secret", 200, `"serverInfo"`},
	} {
		req, _ := http.NewRequest("POST", "http://"+addr+"/", strings.NewReader(body))
		req.Host = tc.host
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.wantText) {
			t.Errorf("%s: got %d %s, want %d with %q", tc.name, resp.StatusCode, b, tc.want, tc.wantText)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// FuzzRequestPath feeds arbitrary bytes to the framer: it never panics,
// and a well-formed message after them is still read (the stream stays
// in sync at the next newline).
func FuzzRequestPath(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pcp_invoke","arguments":{"capability_id":"pcp.inspection.ping"}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","result":{},"id":null}`,
		"{oops", "", " \t\r", "\x00\xff", strings.Repeat("[", 5000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		in = strings.ReplaceAll(in, "\n", " ")
		c, srv := testkit.SocketPair(t)
		defer c.Close()
		lc := newLineConn(srv, &Options{MaxLine: 4096, WriteTimeout: time.Second})
		defer lc.Close()
		go func() {
			io.WriteString(c, in+"\n"+`{"jsonrpc":"2.0","id":"sync","method":"ping"}`+"\n")
			io.Copy(io.Discard, bufio.NewReader(c)) // the errors the framer answers
		}()
		srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			msg, err := lc.Read(context.Background())
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if req, ok := msg.(*sdkrpc.Request); ok && req.ID.Raw() == "sync" {
				return
			}
		}
	})
}

// FuzzToolArguments checks arbitrary arguments against every tool's
// schema: an answer, never a panic.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{`{}`, `{"capability_id":"a.b","params":{}}`, `{"surface_id":"x/1","target":{"role":"push button"}}`, `[]`, `null`, `1e999`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, tl := range tools {
			tl.validate(json.RawMessage(in))
		}
	})
}
