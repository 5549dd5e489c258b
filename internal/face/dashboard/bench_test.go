package dashboard

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// chanSink is the baseline's EventSink: the event handed over a channel,
// with no encoding and no HTTP.
type chanSink chan *api.Event

func (c chanSink) Event(_ string, ev *api.Event) error            { c <- ev; return nil }
func (c chanSink) EventsLost(*api.EventsLost) error               { return nil }
func (c chanSink) SubscriptionEnded(*api.SubscriptionEnded) error { return nil }

// BenchmarkStreamEvent is one event from Broker.Publish to a browser's
// reader of /stream over loopback HTTP, beside the baseline of the same
// publish to an in-process subscriber (the core's own fan-out, no
// encoding, no socket), measured in the same run.
func BenchmarkStreamEvent(b *testing.B) {
	f := newFixture(b)
	data := map[string]any{"app_id": "org.example", "n": 1}
	b.Run("baseline_core_subscriber", func(b *testing.B) {
		sink := make(chanSink, 1)
		sess := f.b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: "inproc"}, core.Endpoint{Events: sink})
		defer sess.Close()
		if _, err := f.b.Subscribe(core.WithSession(context.Background(), sess), &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			f.b.Publish(api.EventAppResponsive, "org.example", "", data)
			<-sink
		}
	})
	b.Run("sse_loopback", func(b *testing.B) {
		c, _ := f.login(b)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", f.base+"/stream", nil)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		for { // past ready
			l, err := rd.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if strings.HasPrefix(l, "data: {\"sequence\"") {
				rd.ReadString('\n')
				break
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			f.b.Publish(api.EventAppResponsive, "org.example", "", data)
			for { // id, data, blank
				l, err := rd.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if l == "\n" {
					break
				}
			}
		}
	})
}
