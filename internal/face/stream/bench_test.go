package stream

import (
	"bufio"
	"testing"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// BenchmarkEventFanout pushes each event to 8 subscribers, each on its own
// framed connection over a Unix socket pair.
func BenchmarkEventFanout(b *testing.B) {
	facetest.EventFanout(b, func(br *core.Broker) func() error {
		client, server := testkit.SocketPair(b)
		b.Cleanup(func() { client.Close() })
		go NewServer(br, Options{}).ServeConn(server, core.SessionInfo{Role: core.RoleAgent, Transport: "unix"})
		if err := frame.Write(client, frame.Frame{Type: frame.SubscribeEvents, Payload: []byte(`{"filter":{"event_types":["surface.created"]}}`)}); err != nil {
			b.Fatal(err)
		}
		rd := frame.NewReader(bufio.NewReaderSize(client, 1<<16), frame.DefaultMaxPayload)
		if f, err := rd.Next(); err != nil || f.Type != frame.SubscribeEvents {
			b.Fatalf("subscribe: %v, %v", f.Type, err)
		}
		return func() error { _, err := rd.Next(); return err }
	})
}
