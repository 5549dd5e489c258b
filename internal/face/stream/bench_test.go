package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
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

// BenchmarkAttachment3MB is one ExecuteRequest whose result carries a
// 3 MB image, with the Go clients on a Unix socket pair: by memfd and
// inline on this face, beside the JSON-RPC face's memfd path (the
// baseline, the same attachment through invoke.capability) and this
// face with no attachment (the round trip alone).
func BenchmarkAttachment3MB(b *testing.B) {
	br, _ := attachBroker(b)
	framed := func(b *testing.B) *client.Framed {
		cc, sc := testkit.SocketPair(b)
		serve(b, NewServer(br, Options{}), sc)
		fc := client.NewFramed(cc)
		b.Cleanup(func() { fc.Close() })
		return fc
	}
	execute := func(capability, mode string) func(b *testing.B) {
		return func(b *testing.B) {
			fc := framed(b)
			ctx := context.Background()
			if capability != "none" {
				b.SetBytes(int64(len(facetest.ImageBytes)))
			}
			for b.Loop() {
				res, err := fc.ExecuteRequest(ctx, execReq(capability, mode))
				if err != nil || (capability != "none" && len(res.Attachments[0].Data) != len(facetest.ImageBytes)) {
					b.Fatalf("%v %+v", err, res)
				}
			}
		}
	}
	b.Run("framed-fd", execute("image", ""))
	b.Run("framed-inline", execute("image", api.AttachmentsInline))
	b.Run("framed-none", execute("none", ""))
	b.Run("jsonrpc-fd", func(b *testing.B) {
		cc, sc := testkit.SocketPair(b)
		done := make(chan struct{})
		go func() { rpc.NewServer(br, rpc.Options{}).ServeConn(sc, facetest.Agent); close(done) }()
		cl := client.New(cc, client.Options{})
		b.Cleanup(func() { cl.Close(); sc.Close(); <-done })
		ctx := context.Background()
		p := &api.InvokeCapabilityParams{CapabilityID: facetest.BlobApp + ".image", AppID: facetest.BlobApp, Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{}`)}
		b.SetBytes(int64(len(facetest.ImageBytes)))
		for b.Loop() {
			res, err := cl.InvokeCapability(ctx, p)
			if err != nil || len(res.Attachments[0].Data) != len(facetest.ImageBytes) {
				b.Fatalf("%v %+v", err, res)
			}
		}
	})
}
