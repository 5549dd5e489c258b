package rpc

import (
	"bufio"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// BenchmarkEventFanout pushes each event to 8 subscribers, each on its own
// JSON-RPC connection over a Unix socket pair.
func BenchmarkEventFanout(b *testing.B) {
	facetest.EventFanout(b, func(br *core.Broker) func() error {
		client, server := testkit.SocketPair(b)
		b.Cleanup(func() { client.Close() })
		go NewServer(br, Options{}).ServeConn(server, core.SessionInfo{Role: core.RoleAgent, Transport: "unix"})
		if _, err := client.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"subscribe.events","params":{"event_types":["surface.created"]}}` + "\n")); err != nil {
			b.Fatal(err)
		}
		rd := bufio.NewReaderSize(client, 1<<16)
		if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"result"`) {
			b.Fatalf("subscribe: %q, %v", line, err)
		}
		return func() error { _, err := rd.ReadSlice('\n'); return err }
	})
}
