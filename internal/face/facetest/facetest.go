// Package facetest holds what the faces' tests share: the event fan-out
// benchmark, whose driver is the same for every face and whose wire is
// each face's own.
package facetest

import (
	"context"
	"net"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// Subscribers is how many connections EventFanout subscribes.
const Subscribers = 8

// Agent is an agent's connection on a Unix socket.
var Agent = core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: -1, PID: -1}

// Serve serves one connection with a face of br until it closes.
type Serve func(br *core.Broker, c net.Conn)

// EventFanout publishes b.N events to Subscribers subscribers, each on its
// own connection over a Unix socket pair served by serve, and counts an op
// when every one has read the event: the whole push path (journal, queues,
// pumps, the face's encoding, the socket). subscribe subscribes the client
// side of a connection to surface.created and returns a function that
// reads one pushed event from it.
func EventFanout(b *testing.B, serve Serve, subscribe func(c net.Conn) (next func() error)) {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	// Queues hold every event, so that none is lost and each is read.
	br, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st,
		LivenessInterval: -1, SubscriberQueue: b.N + 16})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	errs := make(chan error, Subscribers)
	for range Subscribers {
		client, server := testkit.SocketPair(b)
		defer client.Close()
		go serve(br, server)
		next := subscribe(client)
		go func() {
			for range b.N {
				if err := next(); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	data := map[string]any{"surface_id": "surface-42", "app_id": "org.example.mail", "title": "Inbox"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		br.Publish(api.EventSurfaceCreated, "org.example.mail", "surface-42", data)
	}
	for range Subscribers {
		if err := <-errs; err != nil {
			b.Fatalf("reading pushed events: %v", err)
		}
	}
	b.StopTimer()
}
