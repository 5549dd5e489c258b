package stream

import (
	"bufio"
	"net"
	"testing"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
	"github.com/pcp-dev/pcp/internal/frame"
)

// BenchmarkEventFanout pushes each event to 8 subscribers, each on its own
// framed connection.
func BenchmarkEventFanout(b *testing.B) {
	serve := func(br *core.Broker, c net.Conn) { NewServer(br, Options{}).ServeConn(c, facetest.Agent) }
	facetest.EventFanout(b, serve, func(c net.Conn) func() error {
		err := frame.Write(c, frame.Frame{Type: frame.SubscribeEvents, Payload: []byte(`{"filter":{"event_types":["surface.created"]}}`)})
		if err != nil {
			b.Fatal(err)
		}
		rd := frame.NewReader(bufio.NewReaderSize(c, 1<<16), frame.DefaultMaxPayload)
		if f, err := rd.Next(); err != nil || f.Type != frame.SubscribeEvents {
			b.Fatalf("subscribe: %v, %v", f.Type, err)
		}
		return func() error { _, err := rd.Next(); return err }
	})
}
