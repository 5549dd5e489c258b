package stream

import (
	"bufio"
	"context"
	"sync/atomic"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// BenchmarkEventFanout publishes events to 8 subscribers, each on its own
// framed connection over a Unix socket pair, and counts an op when every
// subscriber has read the event's PushEvent frame.
func BenchmarkEventFanout(b *testing.B) {
	const subscribers = 8
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	br, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st,
		LivenessInterval: -1, SubscriberQueue: b.N + 16})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	srv := NewServer(br, Options{})
	var read atomic.Int64
	done := make(chan struct{}, subscribers)
	for range subscribers {
		client, server := testkit.SocketPair(b)
		defer client.Close()
		go srv.ServeConn(server, core.SessionInfo{Role: core.RoleAgent, Transport: "unix"})
		if err := frame.Write(client, frame.Frame{Type: frame.SubscribeEvents, Payload: []byte(`{"filter":{"event_types":["surface.created"]}}`)}); err != nil {
			b.Fatal(err)
		}
		rd := frame.NewReader(bufio.NewReaderSize(client, 1<<16), frame.DefaultMaxPayload)
		if f, err := rd.Next(); err != nil || f.Type != frame.SubscribeEvents {
			b.Fatalf("subscribe: %v, %v", f.Type, err)
		}
		go func() {
			n := 0
			for n < b.N {
				if _, err := rd.Next(); err != nil {
					return
				}
				n++
				read.Add(1)
			}
			done <- struct{}{}
		}()
	}
	data := map[string]any{"surface_id": "surface-42", "app_id": "org.example.mail", "title": "Inbox"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		br.Publish(api.EventSurfaceCreated, "org.example.mail", "surface-42", data)
	}
	for range subscribers {
		<-done
	}
	b.StopTimer()
	if got := read.Load(); got != int64(b.N*subscribers) {
		b.Fatalf("read %d frames, want %d", got, b.N*subscribers)
	}
}
