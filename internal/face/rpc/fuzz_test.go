package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// FuzzServeConn feeds arbitrary bytes to the face as one connection's
// input. Every line the daemon sends back must be a well-formed JSON-RPC
// message whose errors carry catalogue codes, and after the input the
// connection must still answer a request.
func FuzzServeConn(f *testing.F) {
	// Seed with every line the golden transcripts send.
	files, _ := filepath.Glob("testdata/*.txtar")
	for _, file := range files {
		ar, err := txtar.ParseFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, tf := range ar.Files {
			for _, line := range strings.Split(string(tf.Data), "\n") {
				if _, op, rest, ok := golden.ParseLine(line); ok && op == '>' {
					f.Add([]byte(rest + "\n"))
				}
			}
		}
	}
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: f.TempDir(), LivenessInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	addTestService(b)
	srv := NewServer(b, Options{MaxLine: 4096})

	f.Fuzz(func(t *testing.T, input []byte) {
		client, server := testkit.SocketPair(t)
		defer client.Close()
		done := make(chan struct{})
		go func() {
			srv.ServeConn(server, core.SessionInfo{Role: core.RoleAgent, Transport: "unix"})
			close(done)
		}()
		go func() {
			client.Write(input)
			client.Write([]byte("\n" + `{"jsonrpc":"2.0","id":"probe","method":"health.check"}` + "\n"))
		}()
		rd := bufio.NewReaderSize(client, 1<<20)
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			line, err := rd.ReadBytes('\n')
			if err != nil {
				t.Fatalf("connection ended before the probe was answered: %v", err)
			}
			if isProbeReply(t, line) {
				break
			}
		}
		client.Close()
		<-done
	})
}

// isProbeReply checks one line the daemon sent and reports whether it is
// the answer to the probe.
func isProbeReply(t *testing.T, line []byte) bool {
	t.Helper()
	var msgs []json.RawMessage
	if len(line) > 0 && line[0] == '[' {
		if err := json.Unmarshal(line, &msgs); err != nil {
			t.Fatalf("daemon sent invalid JSON: %s", line)
		}
	} else {
		msgs = []json.RawMessage{line}
	}
	probe := false
	for _, raw := range msgs {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Result  json.RawMessage `json:"result"`
			Error   *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("daemon sent invalid JSON: %s", line)
		}
		if m.JSONRPC != "2.0" {
			t.Fatalf("daemon sent a message without jsonrpc 2.0: %s", raw)
		}
		if m.Method != "" {
			continue // a notification or a request to this connection
		}
		if (m.Result == nil) == (m.Error == nil) {
			t.Fatalf("reply needs exactly one of result and error: %s", raw)
		}
		if m.Error != nil {
			if _, ok := api.Code(m.Error.Code).Info(); !ok {
				t.Fatalf("error code %d is not in the catalogue: %s", m.Error.Code, raw)
			}
			if m.Error.Message == "" {
				t.Fatalf("error without a message: %s", raw)
			}
		}
		if string(m.ID) == `"probe"` {
			if m.Error != nil {
				t.Fatalf("probe failed: %s", raw)
			}
			probe = true
		}
	}
	return probe
}
