package scomp

import (
	"slices"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

// backfill merges the journal's events with those the subscription
// delivered already: in sequence, each once, the newest kept.
func TestEventBufferBackfill(t *testing.T) {
	seqs := func(e *eventBuffer) []int64 {
		var out []int64
		for _, ev := range e.evs {
			out = append(out, ev.Sequence)
		}
		return out
	}
	evs := func(s ...int64) []*api.Event {
		var out []*api.Event
		for _, n := range s {
			out = append(out, &api.Event{Sequence: n})
		}
		return out
	}
	e := newEventBuffer()
	for _, ev := range evs(5, 6, 8) {
		e.Event("sub", ev)
	}
	e.backfill(evs(2, 3, 5, 6, 7))
	if got, want := seqs(e), []int64{2, 3, 5, 6, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("merged %v, want %v", got, want)
	}
	var many []int64
	for n := int64(100); n < 100+maxBufferedEvents+10; n++ {
		many = append(many, n)
	}
	e.backfill(evs(many...))
	if got := seqs(e); len(got) != maxBufferedEvents || got[len(got)-1] != many[len(many)-1] {
		t.Fatalf("kept %d events ending %d, want the newest %d", len(got), got[len(got)-1], maxBufferedEvents)
	}
}
