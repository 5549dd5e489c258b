package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"

	"github.com/pcp-dev/pcp/api"
)

// AppendEvent queues ev for the journal and returns at once; it is
// committed with the writer's next batch (Flush waits for that). The
// caller assigns ev.Sequence, which must grow with each event; an event
// whose Sequence is already journaled is ignored. After Close the event
// is dropped.
func (s *Store) AppendEvent(ev api.Event) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	// With more than journalLimit events pending the oldest would be
	// trimmed in the same transaction, so they are dropped now; this also
	// bounds the queue when the writer falls behind.
	if len(s.events) >= s.journalLimit {
		s.events = s.events[1:]
	}
	s.events = append(s.events, ev)
	if s.journalHeld.Load() < int64(s.journalLimit) {
		s.journalHeld.Add(1)
	}
	// Events are written in batches by the writer goroutine, never on
	// the path of a reply: with the next change, after pendingDelay, or
	// once pendingBatch rows are waiting.
	poke := s.pendingLocked(1)
	s.mu.Unlock()
	if poke {
		s.poke()
	}
}

// RecentEvents returns the newest limit events in ascending sequence
// order. Events accepted before the call are committed first, so a
// reader sees every event published before it asked.
func (s *Store) RecentEvents(ctx context.Context, limit int) ([]api.Event, error) {
	return s.EventsBefore(ctx, 0, limit)
}

// EventsBefore is RecentEvents of the events whose sequence is below
// before (0: any).
func (s *Store) EventsBefore(ctx context.Context, before int64, limit int) ([]api.Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	if before <= 0 {
		before = math.MaxInt64
	}
	if err := s.Flush(ctx); err != nil {
		return nil, fmt.Errorf("store: flushing event journal: %w", err)
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT * FROM (
		SELECT seq, type, timestamp, app_id, surface_id, data FROM events WHERE seq < ? ORDER BY seq DESC LIMIT ?
	) ORDER BY seq`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("store: reading event journal: %w", err)
	}
	defer rows.Close()
	var out []api.Event
	for rows.Next() {
		var ev api.Event
		var data sql.NullString
		if err := rows.Scan(&ev.Sequence, &ev.Type, &ev.Timestamp, &ev.AppID, &ev.SurfaceID, &data); err != nil {
			return nil, fmt.Errorf("store: reading event journal: %w", err)
		}
		if data.Valid {
			ev.Data = json.RawMessage(data.String)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: reading event journal: %w", err)
	}
	return out, nil
}

// JournalLength returns the number of events the journal holds, counting
// accepted events the writer has not committed yet, so that it is exact
// as soon as AppendEvent returns.
func (s *Store) JournalLength() int64 { return s.journalHeld.Load() }

// LastEventSeq returns the highest committed event sequence number, 0 for
// an empty journal. The broker continues numbering from it after a
// restart.
func (s *Store) LastEventSeq(ctx context.Context) (int64, error) {
	var n int64
	if err := s.rdb.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM events`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: reading event journal: %w", err)
	}
	return n, nil
}
