package rpc

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// The liveness checks reach a JSON-RPC app through its app channel's
// Ping, which is the health.check request the daemon has always sent:
// these bytes, on the app's own connection. Any answer keeps it alive.
func TestPingIsHealthCheck(t *testing.T) {
	testkit.CheckGoroutines(t)
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, AllowUnsigned: true,
		RateLimits: &core.RateLimits{}, LivenessInterval: 10 * time.Millisecond, LivenessTimeout: 5 * time.Second, NewID: testkit.SeqIDs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	client, server := testkit.SocketPair(t)
	served := make(chan struct{})
	go func() {
		defer close(served)
		NewServer(b, Options{}).ServeConn(server, core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 1})
	}()
	t.Cleanup(func() { client.Close(); <-served })
	rd := bufio.NewReader(client)
	send := func(line string) {
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := client.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":"r","method":"register.capability","params":{"app_id":"org.example.todo","manifest":{"version":"1.0","capabilities":[{"name":"add","tier":1,"trust_level":"auto"}],"signature":""}}}`)
	pings, replied := 0, false
	for pings < 2 || !replied {
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading (after %d pings, replied %v): %v", pings, replied, err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, `{"jsonrpc":"2.0","id":"r",`):
			if !strings.Contains(line, `"result"`) {
				t.Fatalf("register.capability: %s", line)
			}
			replied = true
		default:
			pings++
			want := `{"jsonrpc":"2.0","id":` + strconv.Itoa(pings) + `,"method":"health.check"}`
			if line != want {
				t.Fatalf("daemon sent %s\nwant %s", line, want)
			}
			send(`{"jsonrpc":"2.0","id":` + strconv.Itoa(pings) + `,"result":{"status":"ok"}}`)
		}
	}
}
