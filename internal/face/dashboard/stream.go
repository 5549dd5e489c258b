package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// The live updates: GET /stream is a Server-Sent Events stream of every
// event pcpd publishes, through a core subscription to "*" on a session
// of the user's role. Each event is one SSE message without an event
// name, whose data is the event as events.history returns it; the core's
// own notices have names (ready, lost, ended). See docs/dashboard.md.

// keepAlive is how often an idle stream sends a comment, so that a dead
// peer is noticed and proxies keep it open.
const keepAlive = 20 * time.Second

// streamQueue is how many encoded messages wait for the browser; the
// core's per-subscription queue (and its events.lost) sits behind it.
const streamQueue = 64

// writeTimeout bounds one write to a stream's browser.
const writeTimeout = 10 * time.Second

var errStreamClosed = errors.New("dashboard: stream closed")

// sink is the stream's core.EventSink: it encodes each event and hands
// it to the request's goroutine, which alone writes the response.
type sink struct {
	out  chan []byte
	done chan struct{}
}

func (k *sink) send(b []byte) error {
	select {
	case k.out <- b:
		return nil
	case <-k.done:
		return errStreamClosed
	}
}

func (k *sink) Event(_ string, ev *api.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	msg := make([]byte, 0, len(data)+32)
	msg = append(msg, "id: "...)
	msg = strconv.AppendInt(msg, ev.Sequence, 10)
	msg = append(msg, "\ndata: "...)
	msg = append(msg, data...)
	msg = append(msg, "\n\n"...)
	return k.send(msg)
}

func (k *sink) EventsLost(m *api.EventsLost) error {
	data, _ := json.Marshal(m)
	return k.send(append(append([]byte("event: lost\ndata: "), data...), "\n\n"...))
}

func (k *sink) SubscriptionEnded(m *api.SubscriptionEnded) error {
	data, _ := json.Marshal(m)
	return k.send(append(append([]byte("event: ended\ndata: "), data...), "\n\n"...))
}

func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, se *session) {
	if !s.streamStarted() {
		refuse(w, http.StatusServiceUnavailable, "closing", "pcpd is shutting down")
		return
	}
	defer s.streams.Done()
	rc := http.NewResponseController(w)
	k := &sink{out: make(chan []byte, streamQueue), done: make(chan struct{})}
	defer close(k.done)
	ctx, sess := s.userContext(r.Context(), core.Endpoint{Events: k})
	defer sess.Close()
	seq := s.b.EventSequence()
	if _, err := s.b.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventAll}}); err != nil {
		writeError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// ready says from which sequence on the stream has every event: a
	// page that read its lists before it knows what it may have missed.
	write := func(b []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte("retry: 1000\nevent: ready\ndata: {\"sequence\":" + strconv.FormatInt(seq, 10) + "}\n\n")) {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case b := <-k.out:
			if !write(b) {
				return
			}
		case <-tick.C:
			if !write([]byte(": keep-alive\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.quit:
			return
		case <-se.ended:
			return
		}
	}
}
