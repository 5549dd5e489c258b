package rpc

import (
	"bufio"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// BenchmarkEventFanout publishes events to 8 subscribers, each on its own
// JSON-RPC connection over a Unix socket pair, and counts an op when every
// subscriber has read the event's notification line: the whole push path
// (journal, queues, pumps, the face's encoding, the socket).
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
	var wg sync.WaitGroup
	done := make(chan struct{}, subscribers)
	for range subscribers {
		client, server := testkit.SocketPair(b)
		defer client.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.ServeConn(server, core.SessionInfo{Role: core.RoleAgent, Transport: "unix"})
		}()
		if _, err := client.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"subscribe.events","params":{"event_types":["surface.created"]}}` + "\n")); err != nil {
			b.Fatal(err)
		}
		rd := bufio.NewReaderSize(client, 1<<16)
		if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"result"`) {
			b.Fatalf("subscribe: %q, %v", line, err)
		}
		go func() {
			n := 0
			for n < b.N {
				if _, err := rd.ReadSlice('\n'); err != nil {
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
		b.Fatalf("read %d notifications, want %d", got, b.N*subscribers)
	}
}
