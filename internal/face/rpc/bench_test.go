package rpc

import (
	"bufio"
	"net"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
)

// BenchmarkEventFanout pushes each event to 8 subscribers, each on its own
// JSON-RPC connection.
func BenchmarkEventFanout(b *testing.B) {
	serve := func(br *core.Broker, c net.Conn) { NewServer(br, Options{}).ServeConn(c, facetest.Agent) }
	facetest.EventFanout(b, serve, func(c net.Conn) func() error {
		if _, err := c.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"subscribe.events","params":{"event_types":["surface.created"]}}` + "\n")); err != nil {
			b.Fatal(err)
		}
		rd := bufio.NewReaderSize(c, 1<<16)
		if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"result"`) {
			b.Fatalf("subscribe: %q, %v", line, err)
		}
		return func() error { _, err := rd.ReadSlice('\n'); return err }
	})
}
