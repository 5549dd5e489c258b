// Package facetest holds what the faces' tests share: the event fan-out
// benchmark, whose driver is the same for every face and whose wire is
// each face's own.
package facetest

import (
	"context"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
)

// Subscribers is how many connections EventFanout subscribes.
const Subscribers = 8

// EventFanout publishes b.N events to Subscribers subscribers and counts
// an op when every one has read the event: the whole push path (journal,
// queues, pumps, the face's encoding, the socket). subscribe opens one
// connection on the face, subscribes it to surface.created, and returns a
// function that reads one pushed event from it.
func EventFanout(b *testing.B, subscribe func(br *core.Broker) (next func() error)) {
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
		next := subscribe(br)
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
